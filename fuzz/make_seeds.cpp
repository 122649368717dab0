// Writes the seed corpora of fuzz/corpus/ that are made rather than copied: one valid input per message type,
// segment descriptor, tcp frame stream, encoded image variant, request body and staging sequence. Run by hand
// after a format change (README.md); the suite never writes into fuzz/corpus.
//   build/fuzz/fuzz_make_seeds fuzz/corpus
#include <png.h>
#include <turbojpeg.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "epd/model/image.hpp"
#include "epd/protocol/codec.hpp"
#include "epd/transport/backend_info.hpp"
#include "sample_messages.hpp"
#include "tcp/tcp_info.hpp"
#include "tcp/wire.hpp"

namespace fs = std::filesystem;
using namespace epd;

namespace {

fs::path out_dir;

void put(const std::string& target, const std::string& name, const void* data, size_t size) {
  fs::create_directories(out_dir / target);
  std::ofstream f(out_dir / target / name, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
}
void put(const std::string& target, const std::string& name, const std::vector<uint8_t>& bytes) {
  put(target, name, bytes.data(), bytes.size());
}
void put_text(const std::string& target, const std::string& name, const std::string& text) {
  put(target, name, text.data(), text.size());
}

void codec_seeds() {
  protocol::testing::for_each_message_type([](auto tag) {
    using T = decltype(tag);
    put("codec", std::string(T::kName),
        protocol::encode(protocol::Envelope{"prefill-0", 7, protocol::testing::sample<T>(3)}));
  });
}

void segment_seeds() {
  protocol::SegmentDescriptor d;
  d.instance_id = "decode-0";
  d.host_id = "host-a";
  d.incarnation = 3;
  d.token = 0x1234;
  d.regions = {{1, "kv", 0x7f0000000000, 1 << 20}, {2, "", 0x7f0000100000, 4096}};
  put("segment", "no_backends", protocol::encode_value(d));
  d.backends_version = protocol::kBackendInfoVersion;
  d.backends["tcp"] = transport::encode_info(transport::tcp::TcpInfo{"127.0.0.1:17200"});
  d.backends["shm"] = {1, 2, 3};
  put("segment", "tcp_and_shm", protocol::encode_value(d));
  put("segment", "tcp_info", transport::encode_info(transport::tcp::TcpInfo{"[::1]:9"}));
}

// Matches fuzz_tcp_frame.cpp: its token, fence key and fake regions.
void tcp_frame_seeds() {
  using namespace transport::tcp;
  auto frame = [](std::vector<uint8_t>& s, uint64_t seq, uint64_t addr, uint64_t len, uint64_t fence) {
    WriteHeader h;
    h.seq = seq;
    h.token = 0x746f6b656e2d3432;
    h.addr = addr;
    h.len = len;
    h.fence = fence;
    const auto* p = reinterpret_cast<const uint8_t*>(&h);
    s.insert(s.end(), p, p + sizeof(h));
    s.insert(s.end(), len, uint8_t(seq));
  };
  std::vector<uint8_t> s = {0, 0};  // receiver stream, fence key live
  frame(s, 1, 0x10000, 16, 0);
  frame(s, 2, 0x10000 + 4096 - 8, 8, 0);                // the last bytes of a region
  frame(s, 3, UINT64_MAX - 4095, 32, 0);                // the region at the top of the address space
  frame(s, 4, 0x200000, 512, 0x66656e63652d3137);       // fenced, under the granted key
  frame(s, 5, 0x200000 + 512, 16, 0x66656e63652d3137);  // fenced, a unit the key does not own
  frame(s, 6, 0x10000 + 4090, 16, 0);                   // out of range
  put("tcp_frame", "writes", s);
  std::vector<uint8_t> r = {1};
  Reply ack;
  ack.seq = 5;
  Reply nack;
  nack.type = kTypeNack;
  nack.code = 12;
  nack.seq = 6;
  r.insert(r.end(), reinterpret_cast<uint8_t*>(&ack), reinterpret_cast<uint8_t*>(&ack) + sizeof(ack));
  r.insert(r.end(), reinterpret_cast<uint8_t*>(&nack), reinterpret_cast<uint8_t*>(&nack) + sizeof(nack));
  put("tcp_frame", "replies", r);
}

void png_seed(const std::string& name, const model::Image& img, png_uint_32 format) {
  png_image p{};
  p.version = PNG_IMAGE_VERSION;
  p.width = img.width;
  p.height = img.height;
  p.format = format;
  // Source pixels in the target format: derive from the RGB image (grey: the red channel; alpha: a ramp).
  // A colour-mapped image: one index per pixel into a 256-entry palette of greys.
  const bool mapped = format & PNG_FORMAT_FLAG_COLORMAP;
  const size_t channels = mapped ? 1 : PNG_IMAGE_PIXEL_CHANNELS(format);
  std::vector<uint8_t> palette;
  if (mapped) {
    p.colormap_entries = 256;
    for (int i = 0; i < 256; ++i) palette.insert(palette.end(), {uint8_t(i), uint8_t(i), uint8_t(255 - i)});
  }
  const void* map = mapped ? palette.data() : nullptr;
  std::vector<uint8_t> px(size_t{img.width} * img.height * channels);
  for (size_t i = 0; i < size_t{img.width} * img.height; ++i)
    for (size_t c = 0; c < channels; ++c)
      px[i * channels + c] = c < 3 ? img.rgb[i * 3 + (c % 3)] : uint8_t(i * 7);
  png_alloc_size_t size = 0;
  png_image_write_to_memory(&p, nullptr, &size, 0, px.data(), 0, map);
  std::vector<uint8_t> out(size);
  if (!png_image_write_to_memory(&p, out.data(), &size, 0, px.data(), 0, map)) {
    std::fprintf(stderr, "png %s: %s\n", name.c_str(), p.message);
    return;
  }
  out.resize(size);
  put("image", name, out);
}

void jpeg_seed(const std::string& name, const model::Image& img, int subsamp, int flags) {
  tjhandle tj = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  if (tjCompress2(tj, img.rgb.data(), int(img.width), 0, int(img.height), TJPF_RGB, &buf, &size, subsamp, 75,
                  flags) == 0)
    put("image", name, buf, size);
  tjFree(buf);
  tjDestroy(tj);
}

void image_seeds() {
  const model::Image img = model::make_test_image(12, 9, 5);
  put("image", "small.ppm", model::encode_ppm(img));
  png_seed("rgb.png", img, PNG_FORMAT_RGB);
  png_seed("rgba.png", img, PNG_FORMAT_RGBA);
  png_seed("grey.png", img, PNG_FORMAT_GRAY);
  png_seed("grey_alpha.png", img, PNG_FORMAT_GA);
  png_seed("palette.png", img, PNG_FORMAT_RGB_COLORMAP);
  jpeg_seed("420.jpg", img, TJSAMP_420, 0);
  jpeg_seed("444_progressive.jpg", img, TJSAMP_444, TJFLAG_PROGRESSIVE);
  jpeg_seed("grey.jpg", img, TJSAMP_GRAY, 0);
}

void http_seeds() {
  auto body = [](char which, const std::string& name, const std::string& text) {
    put_text("http_request", name, std::string(1, which) + text);
  };
  body(0, "completions",
       R"({"model":"tiny","prompt":"Hello","max_tokens":8,"temperature":0.5,"top_p":0.9,)"
       R"("top_k":4,"seed":-3,"stop":["\n","x"],"stream":true,"stream_options":{"include_usage":true}})");
  // A 1x1 PPM as base64 ("P6 1 1 255\n" and one pixel).
  const std::string ppm_b64 = "UDYgMSAxIDI1NQr/AAA=";
  body(
      1, "chat",
      R"({"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[)"
      R"({"type":"text","text":"What is it?"},{"type":"image_url","image_url":{"url":"data:image/x-portable-pixmap;base64,)" +
          ppm_b64 +
          R"("}}]},{"role":"assistant","content":"A dot."},{"role":"user","content":"Sure?"}],)"
          R"("max_completion_tokens":4,"stop":"."})");
  body(2, "generate", R"({"prompt":"Hi","max_tokens":3,"image":")" + ppm_b64 + R"("})");
  body(3, "data_uri", "data:image/png;charset=x;base64," + ppm_b64);
}

void staging_seeds() {
  // ring size 64; reserve (room 1, chunk 0, 40 bytes), reserve (1, 1, 40), consume (1, 0), reserve (2, 0,
  // 30), a hostile WATERMARK and grant, release room 1.
  std::vector<uint8_t> s = {64, 0, 0, 1, 0, 40, 0, 1, 1, 1, 40, 0, 2, 1, 0, 0, 2, 0, 30, 0, 4, 0, 0};
  for (int i = 0; i < 40; ++i) s.push_back(uint8_t(i * 37));
  s.insert(s.end(), {3, 1, 0});
  put("staging", "sequence", s);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds CORPUS_DIR (fuzz/corpus)\n");
    return 2;
  }
  out_dir = argv[1];
  codec_seeds();
  segment_seeds();
  tcp_frame_seeds();
  image_seeds();
  http_seeds();
  staging_seeds();
  return 0;
}

// epd-run: one request, colocated (encode + prefill + decode in this process). The output is the oracle
// for disaggregated runs. All logic lives in epd::model::generate().
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>

#include "epd/model/audio.hpp"
#include "epd/model/generate.hpp"
#include "epd/model/grammar.hpp"
#include "epd/model/image_codec.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/mmproj.hpp"
#include "epd/model/prompt_codec.hpp"
#include "epd/model/vision.hpp"
#include "tools_file.hpp"

namespace m = epd::model;

int main(int argc, char** argv) {
  CLI::App app{"epd-run: colocated encode + prefill + decode with the reference model or a checkpoint"};
  std::string model_file, preset_name = "tiny", prompt, prompt_tokens, system, mmproj;
  std::vector<std::string> image_files;
  std::vector<std::string> audio_files;
  uint32_t max_tokens = 16, chunk = 0, threads = 1;
  bool json = false, chat = false;
  std::optional<uint32_t> top_logprobs;  // --logprobs N
  uint32_t decode_page_size = 0;
  std::string decode_dtype, decode_order;
  m::SamplingParams sampling;
  std::vector<std::string> logit_bias;
  auto* model_opt = app.add_option(
      "--model", model_file,
      "model config TOML file, or a Llama-family checkpoint: Hugging Face directory, .gguf or .safetensors");
  app.add_option("--preset", preset_name, "built-in model: tiny | bench")->excludes(model_opt);
  auto* text_opt = app.add_option("--prompt", prompt, "prompt text (tokenized by the model's tokenizer)");
  app.add_option("--prompt-tokens", prompt_tokens, "prompt as token ids, comma-separated (checkpoints)")
      ->excludes(text_opt);
  auto* chat_opt = app.add_flag("--chat", chat, "the prompt is a user message, in the model's chat template")
                       ->needs(text_opt);
  app.add_option("--system", system, "a system message before the user's (with --chat)")->needs(chat_opt);
  app.add_option("--threads", threads, "compute threads of a checkpoint runner")->check(CLI::Range(1u, 256u));
  app.add_option("--mmproj", mmproj, "llama.cpp's mmproj GGUF of the checkpoint: its vision tower")
      ->needs(model_opt);
  app.add_option("--image", image_files,
                 "image file: PNG, JPEG or binary PPM (P6); repeat for several (a model with an mmproj); "
                 "with --chat they stand at the prompt's <__media__> markers if it has them, else before it");
  app.add_option(
      "--audio", audio_files,
      "audio file: WAV, MP3 or FLAC; repeat for several (a model whose mmproj has an audio tower); "
      "after the --image files, at the markers as they are");
  app.add_option("--max-tokens", max_tokens, "tokens to generate (including the first)");
  app.add_option("--chunk", chunk, "prefill chunk size in tokens (0 = whole prompt)");
  app.add_option("--temperature", sampling.temperature, "0 = greedy (default), else sample; 0..2");
  app.add_option("--top-p", sampling.top_p,
                 "nucleus sampling: keep the tokens whose mass reaches this; (0, 1]");
  app.add_option("--top-k", sampling.top_k, "keep at most this many most likely tokens (0 = all)");
  app.add_option("--min-p", sampling.min_p,
                 "drop tokens less likely than this times the most likely one; [0, 1], 0 = off");
  app.add_option("--logit-bias", logit_bias, "ID=BIAS: add BIAS (-100..100) to token ID's logit; repeatable");
  app.add_option("--presence-penalty", sampling.presence_penalty,
                 "subtract this from tokens the answer already has; [-2, 2], 0 = off");
  app.add_option("--frequency-penalty", sampling.frequency_penalty,
                 "subtract this times its count in the answer so far from each token; [-2, 2], 0 = off");
  app.add_option(
      "--repetition-penalty", sampling.repetition_penalty,
      "divide positive logits (multiply negative ones) of prompt and answer tokens; (0, 2], 1 = off");
  app.add_option("--seed", sampling.seed, "seed of the sampling draws (with each token's index)");
  app.add_option("--logprobs", top_logprobs,
                 "with --json, each token's log-probability and this many alternatives (0..20): the oracle "
                 "of the API's logprobs");
  // Any of these runs decode in its own KV layout, converted once from prefill's (the staged path).
  auto* dps =
      app.add_option("--decode-page-size", decode_page_size, "decode KV page size in tokens (1..4096)")
          ->check(CLI::Range(1u, m::kMaxPageSize));
  auto* ddt = app.add_option("--decode-kv-dtype", decode_dtype, "decode KV dtype: f32 | f16 | bf16");
  auto* dord =
      app.add_option("--decode-kv-order", decode_order, "decode KV order: token_head_dim | head_token_dim");
  app.add_flag("--json", json, "print {\"tokens\":[...],\"text\":...} plus timings");
  // Constrained decoding (a GGUF checkpoint), as the router does it for grammar / response_format.
  std::string grammar, json_schema;
  bool json_object = false;
  auto* grammar_opt = app.add_option("--grammar", grammar, "a GBNF grammar (llama.cpp's) the answer follows");
  auto* schema_opt =
      app.add_option("--json-schema", json_schema, "a JSON schema the answer follows")->excludes(grammar_opt);
  app.add_flag("--json-object", json_object, "the answer is a JSON object")
      ->excludes(grammar_opt)
      ->excludes(schema_opt);
  // Function calling, as /v1/chat/completions does it: the tools in the template, a forced call by grammar.
  std::string tools_file, tool_choice = "auto";
  bool one_tool_call = false;
  auto* tools_opt =
      app.add_option("--tools", tools_file, "a JSON file with OpenAI's \"tools\" array (with --chat)")
          ->needs(chat_opt);
  app.add_option("--tool-choice", tool_choice, "auto (default) | none | required | a function's name")
      ->needs(tools_opt);
  app.add_flag("--one-tool-call", one_tool_call, "parallel_tool_calls false: at most one call")
      ->needs(tools_opt);
  CLI11_PARSE(app, argc, argv);

  std::optional<m::KvLayoutChoice> decode_kv;
  if (dps->count() + ddt->count() + dord->count() > 0) {
    decode_kv.emplace();
    decode_kv->page_size = decode_page_size;
    if (ddt->count()) {
      auto dt = m::parse_dtype(decode_dtype);
      if (!dt) {
        std::cerr << "epd-run: --decode-kv-dtype: " << dt.error().to_string() << "\n";
        return 2;
      }
      decode_kv->dtype = *dt;
    }
    if (dord->count()) {
      auto o = m::parse_dim_order(decode_order);
      if (!o) {
        std::cerr << "epd-run: --decode-kv-order: " << o.error().to_string() << "\n";
        return 2;
      }
      decode_kv->order = *o;
    }
  }

  for (const auto& b : logit_bias) {
    const auto eq = b.find('=');
    try {
      if (eq == std::string::npos) throw std::invalid_argument(b);
      sampling.logit_bias.emplace_back(uint32_t(std::stoul(b.substr(0, eq))), std::stof(b.substr(eq + 1)));
    } catch (const std::exception&) {
      std::cerr << "epd-run: --logit-bias " << b << ": expected ID=BIAS\n";
      return 2;
    }
  }
  if (top_logprobs) {
    sampling.logprobs = true;
    sampling.top_logprobs = *top_logprobs;
  }
  if (auto st = m::validate(sampling); !st) {
    std::cerr << "epd-run: " << st.error().to_string() << "\n";
    return 2;
  }

  auto cfg = model_file.empty() ? m::preset(preset_name) : m::load_model_path(model_file);
  if (!cfg) {
    std::cerr << "epd-run: " << cfg.error().to_string() << "\n";
    return 2;
  }
  cfg->threads = threads;
  *cfg = m::with_mmproj(std::move(*cfg), mmproj);
  std::vector<m::TokenId> ids;
  for (size_t at = 0; at < prompt_tokens.size();) {
    const size_t end = std::min(prompt_tokens.find(',', at), prompt_tokens.size());
    try {
      size_t used = 0;
      const unsigned long v = std::stoul(prompt_tokens.substr(at, end - at), &used);
      if (used != end - at || v >= cfg->vocab) throw std::out_of_range("id");
      ids.push_back(static_cast<m::TokenId>(v));
    } catch (const std::exception&) {
      std::cerr << "epd-run: --prompt-tokens: '" << prompt_tokens.substr(at, end - at)
                << "' is not a token id below " << cfg->vocab << "\n";
      return 2;
    }
    at = end + 1;
  }
  if (text_opt->count() == 0 && ids.empty()) {
    std::cerr << "epd-run: give --prompt or --prompt-tokens\n";
    return 2;
  }
  std::vector<m::Image> images;
  std::vector<m::MediaDims> dims;
  for (const auto& file : image_files) {
    auto img = m::read_image_file(file, m::max_rgb_bytes_for(*cfg));
    if (!img) {
      std::cerr << "epd-run: " << img.error().to_string() << "\n";
      return 2;
    }
    dims.push_back({img->width, img->height});
    images.push_back(std::move(*img));
  }
  std::vector<m::Media> media(images.begin(), images.end());
  for (const auto& file : audio_files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      std::cerr << "epd-run: " << file << " cannot be read\n";
      return 2;
    }
    const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    auto audio = m::decode_audio(bytes, UINT64_MAX);
    if (!audio) {
      std::cerr << "epd-run: " << file << ": " << audio.error().to_string() << "\n";
      return 2;
    }
    dims.push_back(m::media_dims(*audio));
    media.push_back(std::move(*audio));
  }
  const m::Image* image = images.empty() ? nullptr : &images.front();
  auto runner = m::make_vision_runner(*cfg);
  if (!runner) {
    std::cerr << "epd-run: " << runner.error().to_string() << "\n";
    return 2;
  }
  // The tools the prompt lists (none for --tool-choice none): a checkpoint's chat renders them with
  // llama.cpp's chat layer below, as /v1/chat/completions does; the reference model writes and reads Hermes
  // calls and takes no grammar.
  std::vector<m::ChatTool> tools;
  if (tools_opt->count() && tool_choice != "none") {
    auto t = epd::run::read_tools_file(tools_file);
    if (!t) {
      std::cerr << "epd-run: " << t.error().to_string() << "\n";
      return 2;
    }
    tools = std::move(*t);
    const bool named = tool_choice != "auto" && tool_choice != "required";
    if (named &&
        std::none_of(tools.begin(), tools.end(), [&](const auto& x) { return x.name == tool_choice; })) {
      std::cerr << "epd-run: --tool-choice " << tool_choice << " names no tool of --tools\n";
      return 2;
    }
    if (cfg->checkpoint.empty() && tool_choice != "auto") {
      std::cerr << "epd-run: a forced tool call needs a grammar, and the reference model takes none\n";
      return 2;
    }
  }
  const bool constrained = grammar_opt->count() || schema_opt->count() || json_object;

  m::GenerateOptions opts;
  std::unique_ptr<m::Grammar> constraint;
  opts.max_tokens = max_tokens;
  opts.chunk = chunk;
  opts.decode_kv = decode_kv;
  opts.sampling = sampling;
  std::vector<m::ChatTurn> turns;
  if (!system.empty()) turns.push_back({"system", system, false});
  // As llama-mtmd-cli, a chat's images stand at the prompt's <__media__> markers, one each; a prompt
  // without markers gets them before its text.
  size_t markers = 0;
  for (size_t at = prompt.find(m::kImageMarker); chat && at != std::string::npos;
       at = prompt.find(m::kImageMarker, at + std::string_view(m::kImageMarker).size()))
    ++markers;
  if (markers != 0 && markers != media.size()) {
    std::cerr << "epd-run: the prompt has " << markers << " " << m::kImageMarker << " markers for "
              << media.size() << " --image and --audio files\n";
    return 2;
  }
  std::string user_text;
  if (markers == 0)
    for (size_t i = 0; i < media.size(); ++i) user_text += m::kImageMarker;
  turns.push_back({"user", user_text + prompt, !media.empty()});

  // A checkpoint's text goes through its tokenizer and generation ends at its end tokens, as the router
  // does it. Token ids need no tokenizer: without one the answer runs to max_tokens and has no text.
  std::shared_ptr<const m::PromptCodec> codec;
  if (!cfg->checkpoint.empty()) {
    auto c = m::PromptCodec::for_model(*cfg);
    if (!c && text_opt->count() > 0) {
      std::cerr << "epd-run: " << c.error().to_string() << "\n";
      return 2;
    }
    if (c) {
      codec = std::move(*c);
      opts.stop_tokens.assign(codec->stop_tokens().begin(), codec->stop_tokens().end());
    }
    if (text_opt->count() > 0) {
      auto p = chat ? codec->chat(turns, dims, tools) : codec->prompt(prompt, dims);
      if (!p) {
        std::cerr << "epd-run: " << p.error().to_string() << "\n";
        return 1;
      }
      ids = std::move(*p);
      auto grids = codec->image_grids(dims);  // where an M-RoPE model's image rows rotate
      if (!grids) {
        std::cerr << "epd-run: " << grids.error().to_string() << "\n";
        return 1;
      }
      opts.image_grids = std::move(*grids);
    }
  } else if (chat) {
    if (!tools.empty()) {
      auto t = m::hermes_turns(turns, tools);
      if (!t) {
        std::cerr << "epd-run: " << t.error().to_string() << "\n";
        return 1;
      }
      turns = std::move(*t);
    }
    auto text = m::render_chat(*cfg, turns);
    if (!text) {
      std::cerr << "epd-run: " << text.error().to_string() << "\n";
      return 1;
    }
    prompt = std::move(*text);
  }
  // A checkpoint's chat with tools: llama.cpp's grammar (lazy for auto), preserved tokens, stop strings
  // and parser of the answer.
  m::ToolConstraint tool;
  std::shared_ptr<const m::ChatAnswerParser> parser;
  if (codec && chat && !tools.empty()) {
    m::ToolUse use;
    if (tool_choice != "auto") use.choice = m::ToolUse::Choice::required;
    if (tool_choice != "auto" && tool_choice != "required") use.named = tool_choice;
    use.parallel = !one_tool_call;
    auto r = codec->render(turns, tools, use);
    auto c = r ? m::tool_constraint(*r, codec->tokenizer()) : r.error();
    if (!c) {
      std::cerr << "epd-run: --tools: " << c.error().to_string() << "\n";
      return 2;
    }
    tool = std::move(*c);
    parser = r->parser;
  }
  epd::protocol::GrammarSpec& spec = tool.grammar;
  if (!spec.empty() && constrained) {
    std::cerr << "epd-run: a forced tool call and a grammar both constrain the answer; give one\n";
    return 2;
  }
  if (constrained) {
    spec.gbnf = json_object ? m::json_object_grammar() : grammar;
    if (schema_opt->count()) {
      auto g = m::json_schema_grammar(json_schema);
      if (!g) {
        std::cerr << "epd-run: --json-schema: " << g.error().to_string() << "\n";
        return 2;
      }
      spec.gbnf = std::move(*g);
    }
  }
  if (!spec.empty()) {
    auto vocab = m::load_grammar_vocab(*cfg);
    auto made = vocab ? m::Grammar::make(*vocab, spec) : vocab.error();
    if (!made) {
      std::cerr << "epd-run: " << made.error().to_string() << "\n";
      return 2;
    }
    constraint = std::move(*made);
    opts.constraint = constraint.get();
  }
  if (images.size() > 1 && cfg->checkpoint.empty()) {
    std::cerr << "epd-run: the reference model takes one image\n";
    return 2;
  }
  auto res = ids.empty() ? m::generate(**runner, prompt, image, opts)
                         : m::generate_tokens(**runner, std::move(ids), opts, media);
  if (!res) {
    std::cerr << "epd-run: " << res.error().to_string() << "\n";
    return 1;
  }
  if (codec) res->text = codec->text(res->tokens, false, tool.preserved);
  for (const std::string& stop : tool.stops)  // the format's stop strings end the text, as the router's do
    if (size_t at = res->text.find(stop); at != std::string::npos) res->text.resize(at);
  if (json) {
    std::string out = m::to_json(*res);
    if (parser)
      out = epd::run::with_parsed_calls(out, *parser, res->text, !one_tool_call);
    else if (!tools.empty())
      out = epd::run::with_tool_calls(out, m::ToolFormat::hermes, tools, res->text, !one_tool_call);
    std::cout << out << "\n";
  } else {
    std::cout << m::escape_text(res->text) << std::endl;  // before the stderr timings
    std::fprintf(stderr,
                 "prompt %zu tokens, generated %zu | encode %.2f ms, prefill %.2f ms, decode %.2f ms\n",
                 res->prompt.size(), res->tokens.size(), res->encode_ms, res->prefill_ms, res->decode_ms);
  }
  return 0;
}

#include "openai_messages.hpp"

#include <algorithm>
#include <string>
#include <string_view>

#include "epd/http/base64.hpp"
#include "epd/http/data_uri.hpp"
#include "epd/model/chat.hpp"
#include "json_body.hpp"
#include "openai_fields.hpp"
#include "tool_fields.hpp"

namespace epd::http::openai {
namespace {

using namespace fields;

class MessagesParser {
 public:
  MessagesParser(const json& doc, const Limits& limits, std::vector<Message>& out)
      : doc_(doc), limits_(limits), out_(out) {}

  Failure messages() {
    const json* v = field(doc_, "messages");
    if (!v) return invalid("messages", "\"messages\" is required (an array of messages)");
    if (!v->is_array()) return wrong_type("messages", "an array of messages", *v);
    if (v->empty()) return invalid("messages", "\"messages\" must not be empty");
    if (v->size() > limits_.max_messages) {
      return oversized("messages", "\"messages\" holds " + std::to_string(v->size()) +
                                       " messages; the limit is " + std::to_string(limits_.max_messages));
    }
    size_t text_bytes = 0;
    for (size_t i = 0; i < v->size(); ++i) {
      std::string at = "messages[" + std::to_string(i) + "]";
      Message m;
      if (auto e = message((*v)[i], at, m)) return e;
      text_bytes += m.text.size();
      for (const auto& c : m.tool_calls) text_bytes += c.arguments.size();
      if (text_bytes > limits_.max_prompt_bytes) {
        return oversized("messages", "the messages' text exceeds the limit of " +
                                         std::to_string(limits_.max_prompt_bytes) + " bytes (at " + at + ")");
      }
      out_.push_back(std::move(m));
    }
    return {};
  }

 private:
  Failure message(const json& m, const std::string& at, Message& out) {
    if (!m.is_object()) return wrong_type(at, "an object with \"role\" and \"content\"", m);
    const std::string role_param = at + ".role";
    const json* role = field(m, "role");
    if (!role) return invalid(role_param, in_quotes(role_param) + " is required");
    if (!role->is_string()) return wrong_type(role_param, "a string", *role);
    out.role = role->get<std::string>();
    if (out.role == "function")
      return invalid(role_param, "role \"function\" is not supported by epd; send role \"tool\"");
    if (out.role != "system" && out.role != "developer" && out.role != "user" && out.role != "assistant" &&
        out.role != "tool") {
      return invalid(role_param, in_quotes(role_param) + " is " + clip(out.role) +
                                     "; it must be \"system\", \"developer\", \"user\", \"assistant\" or "
                                     "\"tool\"");
    }
    if (field(m, "function_call"))
      return invalid(at + ".function_call", "\"function_call\" is not supported by epd; send \"tool_calls\"");
    if (const json* v = field(m, "tool_calls")) {
      if (out.role != "assistant")
        return invalid(at + ".tool_calls", "only assistant messages carry \"tool_calls\"");
      if (auto e = tool_calls(*v, at + ".tool_calls", out)) return e;
    }
    if (out.role == "tool") {
      const std::string id_param = at + ".tool_call_id";
      const json* id = field(m, "tool_call_id");
      if (!id) return invalid(id_param, in_quotes(id_param) + " is required");
      if (!id->is_string()) return wrong_type(id_param, "a string", *id);
      out.tool_call_id = id->get<std::string>();
    }

    const std::string content_param = at + ".content";
    const json* content = field(m, "content");
    if (!content) {
      if (out.role == "assistant") return {};  // OpenAI allows an assistant turn without content (calls)
      return invalid(content_param, in_quotes(content_param) + " is required");
    }
    if (content->is_string()) {
      out.text = content->get<std::string>();
      return no_marker(out.text, content_param);
    }
    if (!content->is_array()) {
      return wrong_type(content_param, "a string or an array of content parts", *content);
    }
    // As llama-server joins parts: text parts with "\n" between them, each image as its marker, with no
    // "\n" next to it.
    bool after_text = false;
    for (size_t j = 0; j < content->size(); ++j) {
      const std::string at_j = content_param + "[" + std::to_string(j) + "]";
      const size_t items = out.media.size();
      std::string text;
      if (auto e = part((*content)[j], at_j, out, text)) return e;
      if (out.media.size() > items) {
        out.text += model::kImageMarker;
        after_text = false;
        continue;
      }
      if (auto e = no_marker(text, at_j + ".text")) return e;
      if (after_text) out.text += '\n';
      out.text += text;
      after_text = true;
    }
    return {};
  }

  // [{"id", "type": "function", "function": {"name", "arguments": a JSON object's text}}].
  Failure tool_calls(const json& v, const std::string& at, Message& out) {
    if (!v.is_array()) return wrong_type(at, "an array of tool calls", v);
    if (v.size() > kMaxTools)
      return invalid(at, in_quotes(at) + " holds " + std::to_string(v.size()) + " calls; the limit is " +
                             std::to_string(kMaxTools));
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string ati = at + "[" + std::to_string(i) + "]";
      const json& c = v[i];
      if (!c.is_object()) return wrong_type(ati, "an object", c);
      model::ToolCall call;
      if (const json* id = field(c, "id")) {
        if (!id->is_string()) return wrong_type(ati + ".id", "a string", *id);
        call.id = id->get<std::string>();
      }
      if (const json* type = field(c, "type"); type && *type != "function")
        return invalid(ati + ".type", in_quotes(ati + ".type") + " must be \"function\"");
      const json* f = field(c, "function");
      if (!f || !f->is_object())
        return invalid(ati + ".function", in_quotes(ati + ".function") + " must be an object");
      const json* name = field(*f, "name");
      if (!name || !name->is_string() || !valid_function_name(name->get_ref<const std::string&>()))
        return invalid(ati + ".function.name", in_quotes(ati + ".function.name") +
                                                   " must be a name of 1 to 64 of a-z, A-Z, 0-9, _ and -");
      call.name = name->get<std::string>();
      const json* args = field(*f, "arguments");
      if (!args || !args->is_string())
        return invalid(ati + ".function.arguments",
                       in_quotes(ati + ".function.arguments") + " must be a string (a JSON object's text)");
      call.arguments = args->get<std::string>();
      // Parsed again by the prompt's renderer with its keys in order; here only checked, within the depth
      // limit.
      if (std::holds_alternative<HttpError>(parse_json_object(call.arguments, limits_.max_json_depth)))
        return invalid(ati + ".function.arguments",
                       in_quotes(ati + ".function.arguments") + " must be a JSON object's text");
      out.tool_calls.push_back(std::move(call));
    }
    return {};
  }

  // llama.cpp's image marker in a client's text would stand for an image nobody sent.
  Failure no_marker(std::string_view text, const std::string& param) {
    if (text.find(model::kImageMarker) == std::string_view::npos) return {};
    return invalid(param, in_quotes(param) + " contains " + std::string(model::kImageMarker) +
                              ", which marks where an image stands; send images as image_url parts");
  }

  Failure part(const json& p, const std::string& at, Message& out, std::string& text_out) {
    if (!p.is_object()) return wrong_type(at, "an object with a \"type\"", p);
    const std::string type_param = at + ".type";
    const json* type = field(p, "type");
    if (!type) return invalid(type_param, in_quotes(type_param) + " is required");
    if (!type->is_string()) return wrong_type(type_param, "a string", *type);
    if (*type == "text") {
      const json* text = field(p, "text");
      if (!text) return invalid(at + ".text", in_quotes(at + ".text") + " is required");
      if (!text->is_string()) return wrong_type(at + ".text", "a string", *text);
      text_out = text->get<std::string>();
      return {};
    }
    if (*type == "input_audio") {
      if (out.role != "user") return invalid(type_param, "audio is only allowed in user messages");
      return audio(p, at + ".input_audio", out);
    }
    if (*type != "image_url") {
      return invalid(type_param, in_quotes(type_param) + " is " + clip(type->get<std::string>()) +
                                     "; epd takes \"text\", \"image_url\" and \"input_audio\" parts");
    }
    if (out.role != "user") return invalid(type_param, "images are only allowed in user messages");
    return image(p, at + ".image_url", out);
  }

  // "input_audio": {"data": base64 of the file, "format": "wav" | "mp3"} (OpenAI's shape). The bytes must
  // be what the format says (by their magic); the router decodes them.
  Failure audio(const json& p, const std::string& param, Message& out) {
    const json* input = field(p, "input_audio");
    if (!input) return invalid(param, in_quotes(param) + " is required");
    if (!input->is_object()) return wrong_type(param, "an object with \"data\" and \"format\"", *input);
    const json* format = field(*input, "format");
    if (!format || !format->is_string() || !(*format == "wav" || *format == "mp3"))
      return invalid(param + ".format", in_quotes(param + ".format") + " must be \"wav\" or \"mp3\"");
    const json* data = field(*input, "data");
    if (!data) return invalid(param + ".data", in_quotes(param + ".data") + " is required");
    if (!data->is_string()) return wrong_type(param + ".data", "a base64 string", *data);
    if (data->get_ref<const std::string&>().empty())
      return invalid(param + ".data", in_quotes(param + ".data") + " is empty");
    auto bytes = base64_decode(data->get_ref<const std::string&>(), limits_.max_audio_bytes);
    if (!bytes) {
      if (bytes.error().code == protocol::ErrorCode::oversized)
        return oversized(param + ".data", in_quotes(param + ".data") + ": " + bytes.error().detail);
      return invalid(param + ".data", in_quotes(param + ".data") + ": " + bytes.error().detail);
    }
    const auto& b = *bytes;
    const bool wav = b.size() >= 12 && std::equal(b.begin(), b.begin() + 4, "RIFF") &&
                     std::equal(b.begin() + 8, b.begin() + 12, "WAVE");
    const bool mp3 = (b.size() >= 3 && std::equal(b.begin(), b.begin() + 3, "ID3")) ||
                     (b.size() >= 2 && b[0] == 0xFF && (b[1] & 0xE0) == 0xE0);
    if (*format == "wav" ? !wav : !mp3)
      return invalid(param + ".data", in_quotes(param + ".data") + " is not a" +
                                          (*format == "wav" ? " WAV (RIFF/WAVE)" : "n MP3") + " file");
    out.media.push_back({std::move(*bytes), true});
    return {};
  }

  // "image_url": {"url": "data:...", "detail": ...} or, as some clients send it, "image_url": "data:...".
  Failure image(const json& p, const std::string& param, Message& out) {
    const json* image_url = field(p, "image_url");
    if (!image_url) return invalid(param, in_quotes(param) + " is required");
    const json* url = image_url;
    std::string url_param = param;
    if (image_url->is_object()) {
      url_param = param + ".url";
      url = field(*image_url, "url");
      if (!url) return invalid(url_param, in_quotes(url_param) + " is required");
      // The model sees every image at its one resolution; detail is checked but changes nothing.
      if (const json* detail = field(*image_url, "detail")) {
        if (!(detail->is_string() && (*detail == "auto" || *detail == "low" || *detail == "high"))) {
          return invalid(param + ".detail",
                         in_quotes(param + ".detail") + " must be \"auto\", \"low\" or \"high\"");
        }
      }
    }
    if (!url->is_string()) return wrong_type(url_param, "a data: URI string", *url);
    auto decoded = decode_image_data_uri(url->get_ref<const std::string&>(), limits_.max_image_bytes);
    if (auto* e = std::get_if<HttpError>(&decoded)) {
      e->message = in_quotes(url_param) + ": " + e->message;
      e->param = url_param;
      return std::move(*e);
    }
    out.media.push_back({std::move(std::get<std::vector<uint8_t>>(decoded)), false});
    return {};
  }

  const json& doc_;
  const Limits& limits_;
  std::vector<Message>& out_;
};

}  // namespace

std::optional<HttpError> parse_messages(const json& doc, const Limits& limits, std::vector<Message>& out) {
  return MessagesParser(doc, limits, out).messages();
}

}  // namespace epd::http::openai

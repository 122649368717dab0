// Hugging Face's Jinja engine (@huggingface/jinja, what transformers.js runs chat templates with) as the
// oracle of epd's chat templates (tests/model/tokenizer/tokenizer_oracle_test.cpp): renders a checkpoint's
// chat_template for each conversation with add_generation_prompt.
//   node render_chat.mjs --input spec.json --output rendered.json
// spec: {"template", "bos_token", "eos_token", "conversations": [[{"role", "content"}]]}; a conversation may
// also be {"messages": [...], "tools": [...]} (function calling: messages with "tool_calls", role "tool").
// An optional "context" object adds variables (llama.cpp gives every template date_string, datetime and
// enable_thinking).
// output: {"rendered": [text or {"error": message}]} (a template may refuse a conversation: raise_exception)
import {readFileSync, writeFileSync} from "node:fs";
import {parseArgs} from "node:util";
import {Template} from "@huggingface/jinja";

const {values: args} = parseArgs({options: {input: {type: "string"}, output: {type: "string"}}});
if (!args.input || !args.output) {
    console.error("usage: render_chat.mjs --input spec.json --output rendered.json");
    process.exit(2);
}
const spec = JSON.parse(readFileSync(args.input, "utf8"));
const template = new Template(spec.template);
const rendered = spec.conversations.map((conversation) => {
    const messages = Array.isArray(conversation) ? conversation : conversation.messages;
    const tools = Array.isArray(conversation) ? undefined : conversation.tools;
    try {
        // raise_exception is the engine's own built-in: it throws.
        return template.render({...(spec.context ?? {}), messages, bos_token: spec.bos_token,
            eos_token: spec.eos_token, add_generation_prompt: true, ...(tools ? {tools} : {})});
    } catch (e) {
        return {error: String(e.message ?? e)};
    }
});
writeFileSync(args.output, JSON.stringify({rendered}));

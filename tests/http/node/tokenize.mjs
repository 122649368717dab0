// llama.cpp as the tokenizer oracle (tests/model/tokenizer/tokenizer_oracle_test.cpp): loads a GGUF file
// with node-llama-cpp's prebuilt CPU build and tokenizes every string of the input twice, without and with
// special-token parsing (llama_tokenize with add_special = false), and detokenizes the results.
//   node tokenize.mjs --model FILE.gguf --input strings.json --output tokens.json [--vocab-only]
// --vocab-only loads only the vocabulary (llama.cpp's vocab_only): for files without tensors, such as
// llama.cpp's models/ggml-vocab-*.gguf.
// input: {"strings": [...]}; output: {"bos", "eos", "results": [{"plain": [ids], "special":
// [ids], "text": detokenize(plain), "text_special": detokenize(special, true)}]}
import {readFileSync, writeFileSync} from "node:fs";
import {parseArgs} from "node:util";
import {getLlama} from "node-llama-cpp";

const {values: args} = parseArgs({
    options: {model: {type: "string"}, input: {type: "string"}, output: {type: "string"},
        "vocab-only": {type: "boolean"}}
});
if (!args.model || !args.input || !args.output) {
    console.error("usage: tokenize.mjs --model FILE.gguf --input strings.json --output tokens.json");
    process.exit(2);
}

const llama = await getLlama({gpu: false, build: "never", usePrebuiltBinaries: true, progressLogs: false,
    logLevel: "error"});
const model = await llama.loadModel({modelPath: args.model, gpuLayers: 0,
    vocabOnly: args["vocab-only"] === true});
const {strings} = JSON.parse(readFileSync(args.input, "utf8"));
const results = strings.map((s) => {
    const plain = Array.from(model.tokenize(s, false));
    const special = Array.from(model.tokenize(s, true));
    return {plain, special, text: model.detokenize(plain, false), text_special: model.detokenize(special, true)};
});
writeFileSync(args.output, JSON.stringify({bos: model.tokens.bos, eos: model.tokens.eos, results}));
await model.dispose();
await llama.dispose();

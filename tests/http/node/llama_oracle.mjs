// llama.cpp (node-llama-cpp's prebuilt CPU build) as the oracle of epd's checkpoint runner: evaluates a
// prompt of token ids on a GGUF file and prints the logits at every prompt position and `generate` greedy
// tokens (argmax, ties to the lower id) with how clear each choice was (greedy_leads: [best - runner-up,
// largest |logit|]), as JSON on stdout. F32 KV cache, no flash attention, no BOS added:
// exactly the ids given. Usage: node llama_oracle.mjs SPEC.json
//   SPEC: {"model": "/path/model.gguf", "prompt": [ids...], "generate": 32, "threads": 1}
import {readFileSync} from "node:fs";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
// build: "never": only the prebuilt binary of @node-llama-cpp/linux-x64, never a compiler or a download.
const llama = await getLlama({gpu: false, build: "never", usePrebuiltBinaries: true, progressLogs: false,
                              logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: spec.model, gpuLayers: 0});
const contextSize = spec.prompt.length + spec.generate + 8;
const context = await model.createContext({
  contextSize, batchSize: contextSize, sequences: 1, flashAttention: false, threads: spec.threads ?? 1,
  experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
});
const sequence = context.getSequence();

// Dense logits by token id from node-llama-cpp's Map (every id is present).
function dense(map) {
  const out = new Array(map.size);
  for (const [id, v] of map) out[id] = v;
  for (let i = 0; i < out.length; i++)
    if (out[i] === undefined) throw new Error(`no logit for token ${i}`);
  return out;
}
function argmax(xs) {
  let best = 0;
  for (let i = 1; i < xs.length; i++) if (xs[i] > xs[best]) best = i;
  return best;
}

const withLogits = (t) => [t, {generateNext: {logits: true}}];
const results = await sequence.controlledEvaluate(spec.prompt.map(withLogits));
const promptLogits = results.map((r, i) => {
  if (!r?.next?.logits) throw new Error(`no logits at prompt position ${i}`);
  return dense(r.next.logits);
});
// How clear each greedy choice was: [best - runner-up, largest |logit|] of the logits it was taken from.
function lead(xs) {
  let best = -Infinity, second = -Infinity, top = 0;
  for (const x of xs) {
    if (x > best) { second = best; best = x; } else if (x > second) second = x;
    top = Math.max(top, Math.abs(x));
  }
  return [best - second, top];
}
const greedy = [];
const greedyLeads = [];
let last = promptLogits[promptLogits.length - 1];
while (greedy.length < spec.generate) {
  const t = argmax(last);
  greedy.push(t);
  greedyLeads.push(lead(last));
  if (greedy.length === spec.generate) break;
  const [r] = await sequence.controlledEvaluate([withLogits(t)]);
  last = dense(r.next.logits);
}
process.stdout.write(JSON.stringify({prompt_logits: promptLogits, greedy, greedy_leads: greedyLeads}));
await context.dispose();
await model.dispose();
await llama.dispose();

// llama.cpp's side of `epd-bench model --model FILE.gguf`: the same measurements epd makes, on the same
// weights, in node-llama-cpp's prebuilt CPU build (F32 KV cache, no flash attention). Prints JSON:
//   {"prefill_tps": .., "decode1_tps": .., "decode8_tps": ..}
// SPEC (argv[2], JSON): {"model", "prompt_len", "decode_prompt_len", "steps", "repeat", "threads", "vocab"}
import {readFileSync} from "node:fs";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const llama = await getLlama({gpu: false, build: "never", usePrebuiltBinaries: true, progressLogs: false,
                              logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: spec.model, gpuLayers: 0});
const perSeq = Math.max(spec.prompt_len, spec.decode_prompt_len + spec.steps) + 16;
const context = await model.createContext({
  contextSize: 8 * perSeq, batchSize: Math.max(spec.prompt_len, 8), sequences: 8, flashAttention: false,
  threads: spec.threads, experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
});
const seqs = Array.from({length: 8}, () => context.getSequence());
// The prompts epd-bench uses: token (i * 7 + salt * 13) % vocab.
const prompt = (n, salt) => Array.from({length: n}, (_, i) => (i * 7 + salt * 13) % spec.vocab);
const now = () => Number(process.hrtime.bigint()) / 1e9;

async function bestOf(fn) {
  let best = Infinity;
  for (let r = 0; r < spec.repeat; r++) best = Math.min(best, await fn());
  return best;
}

const prefillS = await bestOf(async () => {
  await seqs[0].clearHistory();
  const t0 = now();
  await seqs[0].evaluateWithoutGeneratingNewTokens(prompt(spec.prompt_len, 0));
  return now() - t0;
});

// Greedy steps for `batch` sequences at once: each step queues one token per sequence; node-llama-cpp
// gathers the queued tokens into one llama_decode batch.
async function decode(batch) {
  return bestOf(async () => {
    const last = [];
    for (let b = 0; b < batch; b++) {
      await seqs[b].clearHistory();
      const p = prompt(spec.decode_prompt_len, b);
      await seqs[b].evaluateWithoutGeneratingNewTokens(p.slice(0, -1));
      last.push(p[p.length - 1]);
    }
    const t0 = now();
    for (let i = 0; i < spec.steps; i++) {
      const outs = await Promise.all(seqs.slice(0, batch).map((s, b) =>
        s.controlledEvaluate([[last[b], {generateNext: {token: true}}]])));
      for (let b = 0; b < batch; b++) last[b] = outs[b][0]?.next?.token ?? 0;
    }
    return now() - t0;
  });
}
const d1 = await decode(1);
const d8 = await decode(8);
process.stdout.write(JSON.stringify({
  prefill_tps: spec.prompt_len / prefillS, decode1_tps: spec.steps / d1, decode8_tps: 8 * spec.steps / d8,
}));
await context.dispose();
await model.dispose();
await llama.dispose();

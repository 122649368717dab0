#!/usr/bin/env python3
# Prints the per-message field tables of docs/protocol.md from protocol/ headers (run from the repo root
# after changing a message; paste the output over the "Messages" section).
import re,sys
hdr=open('protocol/include/epd/protocol/messages.hpp').read()+open('protocol/include/epd/protocol/segment.hpp').read()+open('protocol/include/epd/protocol/kv_layout.hpp').read()
who={
 'Hello':'any instance → registry (the router by default), at start and after a restart. Carries the instance\'s transfer segment and, for prefill/decode, its KV layout.',
 'HelloAck':'registry → instance, in reply to HELLO. `accepted=false` with a reason when e.g. the id is taken by a live instance.',
 'Peers':'registry → every member after each membership change: the full list (so a member never applies a delta to a stale view).',
 'Heartbeat':'instance → registry and instance → peers, every heartbeat interval; carries load so the router can pick the least loaded instance.',
 'Goodbye':'instance → registry and peers on clean shutdown, so rooms fail at once instead of after missed heartbeats.',
 'Bootstrap':'decode → prefill: decode\'s pre-allocation for a room (destination pages in token order, the aux slot, how many chunks to expect).',
 'KvStatus':'prefill → decode: `success` after the last chunk and the aux record are in decode\'s memory; `failed` with code and reason at once on any failure. Also decode → prefill to fail a room early.',
 'ChunkReady':'prefill → decode: one chunk is in place (staged path: in the staging ring at `offset`/`round`).',
 'Abort':'either side → the other: stop working on the room; the receiver frees what it holds for it and answers ABORT_ACK.',
 'AbortAck':'reply to ABORT: the sender will not touch the room\'s memory again.',
 'StagingReq':'prefill → decode: asks for ring space for one chunk of a room whose layouts differ.',
 'StagingRsp':'decode → prefill: where the chunk may go (`offset`, `round`) or `oversized` (can never fit: the room fails).',
 'Watermark':'decode → writers: everything before (`round`, `tail`) has been scattered; that ring space may be reused.',
 'EmbedMeta':'encoder → prefill: the room\'s embeddings are computed; their size.',
 'EmbedPull':'prefill → encoder: the landing address in prefill\'s segment where the encoder writes the embeddings (or a non-ok code when prefill cannot take them).',
 'EmbedDone':'encoder → prefill: the embeddings are in place (`ok`), or the write failed with code and reason.',
 'Submit':'router → encoder, prefill and decode: a room\'s work. Each role reads the fields it needs.',
 'Tokens':'decode → router: generated tokens, streamed as they are produced.',
 'RoomResult':'role → router: the terminal report of a room (RESULT); `ok=false` carries the code and reason of the failure.',
 'Cancel':'router → roles: the client gave up or the router retries elsewhere; the roles abort the room.',
 'ErrorReply':'any → sender of a frame that could not be accepted (malformed, unexpected in the room\'s state, unknown room).',
 'PeerInfo':'nested in PEERS.','SegmentDescriptor':'nested in HELLO and PEERS; built by the transport engine.',
 'RegionDesc':'nested in SegmentDescriptor.','KvLayout':'nested in HELLO and PEERS.','StagingStats':'nested in HEARTBEAT and PeerInfo: staging figures (docs/staging.md).',
}
structs={}
for m in re.finditer(r'struct (\w+) \{(.*?)\n\};',hdr,re.S):
    name,body=m.group(1),m.group(2)
    kt=re.search(r'kType = MessageType::(\w+)',body)
    decls={}
    for d in re.finditer(r'^\s+([\w:<>, ]+?) (\w+)(?: = [^;]*)?;\s*(?://\s*(.*))?$',body,re.M):
        decls[d.group(2)]=(d.group(1),d.group(3) or '')
    fields=re.findall(r'v\.(req|opt)\("(\w+)", s\.(\w+)\)',body)
    structs[name]=(kt.group(1) if kt else None,decls,fields)
types=dict(re.findall(r'\n  (\w+) = (\d+),',hdr.split('enum class MessageType')[1].split('};')[0]))
order=['Hello','HelloAck','Peers','Heartbeat','Goodbye','Bootstrap','KvStatus','ChunkReady','Abort','AbortAck','StagingReq','StagingRsp','Watermark','EmbedMeta','EmbedPull','EmbedDone','Submit','Tokens','RoomResult','Cancel','ErrorReply','PeerInfo','SegmentDescriptor','RegionDesc','KvLayout','StagingStats']
for name in order:
    kt,decls,fields=structs[name]
    title=f"### {kt.upper()} (type {types[kt]}) — `{name}`" if kt else f"### `{name}` (nested)"
    print(title); print(); print(who[name]); print()
    print("| key | type | required | notes |"); print("|---|---|---|---|")
    for ro,key,mem in fields:
        t,c=decls.get(mem,('?',''))
        print(f"| `{key}` | `{t.strip()}` | {'yes' if ro=='req' else 'no'} | {c} |")
    print()

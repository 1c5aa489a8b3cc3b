"""llama-cpp-python's verdicts for docs/peers.md: ``check_decoder`` under ``--law llama.cpp`` with
the engine's own logits as the target (verispec/peers/llama_cpp_peer.py), on the tiny target that
``python -m tests.peer_verdicts --out /tmp/peers/m --write-only`` writes.

    python -m tests.peer_verdicts_llama lookup|plain 'FLAGS_AS_JSON' FRACTION

prints one JSON line.
"""
import sys, time, json
from pathlib import Path
from verispec.decoder_api import check_decoder
from verispec.peers.llama_cpp_peer import LlamaCppPeer
import llama_cpp
lookup = None if sys.argv[1] == "plain" else 10
flags = json.loads(sys.argv[2])
t = time.time()
r = check_decoder(lambda p: LlamaCppPeer(Path(p), lookup_tokens=lookup), model="/tmp/peers/m/tinyllama.gguf", law="llama.cpp",
                  target_law="engine-logits", fraction=float(sys.argv[3]), depth=64, **flags)
o = r.results[0]
print(json.dumps({"peer": "llama-cpp-python", "version": llama_cpp.__version__, "path": sys.argv[1], "flags": flags,
                  "state": o.numbers.get("state"), "tokens": o.numbers.get("tokens"), "design_tokens": o.numbers.get("design_tokens"),
                  "power": o.numbers.get("power"), "minutes": round((time.time()-t)/60, 2), "detail": o.detail}))

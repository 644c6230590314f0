#!/usr/bin/env bash
# compare-behaviour.sh BIN OUTDIR: what a refactor must not change, written to OUTDIR: the
# --help of every subcommand, the events of one recorded run (a runtime alert acknowledged)
# and the request file's keys in order, times, numbers, PIDs and temp paths masked.
# Run it with the build before and the build after, then `diff -r` the two directories.
set -u
BIN=$1; OUT=$2; rm -rf "$OUT"; mkdir -p "$OUT"
for s in "" run report diff daemon status replay; do "$BIN" $s --help > "$OUT/help-${s:-main}.txt" 2>&1; done
W=$(mktemp -d)
cat > "$W/train.py" <<'PY'
import os, signal, time, json
saved = []
def on(sig, frame):
    req = os.environ["WATCHDOG_REQUEST_FILE"]
    d = json.load(open(req))
    open(req + ".ack", "w").write(json.dumps({"seq": d["seq"], "path": os.path.abspath("ck.pt"), "step": 7}))
    open("ck.pt", "w").write("x" * 100)
    saved.append(1)
signal.signal(signal.SIGUSR1, on)
t = time.time()
while time.time() - t < 4:
    time.sleep(0.05)
PY
cd "$W" && "$BIN" run --no-notify --no-status -q --max-runtime 4s --lead 2s --signal USR1 \
   --events "$W/ev.jsonl" --request-file "$W/req.json" -- python3 train.py
echo "exit $?" > "$OUT/exit.txt"
python3 - "$W" "$OUT" <<'PY'
import json, sys, re
w, out = sys.argv[1], sys.argv[2]
def mask(v, k=""):
    if isinstance(v, dict): return {kk: mask(vv, kk) for kk, vv in v.items()}
    if isinstance(v, list): return [mask(x, k) for x in v]
    if isinstance(v, (int, float)) and not isinstance(v, bool): return "<n>"
    if isinstance(v, str) and (re.search(r"\d", v) or "/tmp/" in v): return "<s>"
    return v
with open(out + "/events.txt", "w") as f:
    for line in open(w + "/ev.jsonl"):
        e = json.loads(line)
        e.pop("environment", None)
        f.write(re.sub(r"tmp\.[A-Za-z0-9]+", "tmp.X", json.dumps(mask(e))) + "\n")
try:
    req = json.load(open(w + "/req.json"))
    open(out + "/request.txt", "w").write(json.dumps(list(req.keys())) + "\n" + json.dumps(mask(req)) + "\n")
except Exception as e:
    open(out + "/request.txt", "w").write("no request file: %s\n" % e)
PY
rm -rf "$W"

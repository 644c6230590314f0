"""A toy training loop that checkpoints when watchdog asks: watchdog run -- python3 examples/train.py [CKPT_DIR]

Env: CHECKPOINT_DIR (default ./checkpoints), TRAIN_STEPS (200), TRAIN_STEP_S (0.05),
TRAIN_LEAK_MIB (MiB kept per step, default 0: set it to watch a leak get caught).
"""
import os, pickle, random, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import training_watchdog as tw  # noqa: E402

ckpt_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CHECKPOINT_DIR", "checkpoints")
steps, step_s = int(os.environ.get("TRAIN_STEPS", "200")), float(os.environ.get("TRAIN_STEP_S", "0.05"))
leak = int(float(os.environ.get("TRAIN_LEAK_MIB", "0")) * 2**20)
os.makedirs(ckpt_dir, exist_ok=True)
tw.install()  # catches $WATCHDOG_SIGNAL (SIGUSR1): only sets a flag, the loop saves at the next step

w, b, kept = random.random(), random.random(), []
for step in range(steps):
    x = random.uniform(-1, 1)
    err = (w * x + b) - (3 * x + 1)  # learn y = 3x + 1 by SGD
    w, b = w - 0.1 * err * x, b - 0.1 * err
    kept.append(b"\x01" * leak)  # a leak (a growing cache, say): pages really touched
    time.sleep(step_s)
    if tw.checkpoint_requested():
        req = tw.request() or {}
        path = os.path.join(ckpt_dir, "step-%06d.pkl" % step)
        with open(path + ".tmp", "wb") as f:
            pickle.dump({"step": step, "w": w, "b": b}, f)
        os.replace(path + ".tmp", path)
        tw.acknowledge()
        print("step %d: saved %s (asked for %s, %s)" % (step, path, req.get("resource"), req.get("reason")), flush=True)
print("done: w=%.3f b=%.3f" % (w, b), flush=True)

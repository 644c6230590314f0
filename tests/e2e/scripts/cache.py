"""Page-cache and tmpfs workloads for the end-to-end tests of the cgroup memory figure.

Usage: cache.py REPORT MODE [options]

  epochs  a data loader: writes a data set file of --mib MiB at --file (so its page cache
          is charged to this process's cgroup), then reads it whole --epochs times, with
          read() or, with --mmap, through a mapping.
  write   checkpoints to disk: writes --mib MiB in files of --file-mib MiB into --dir,
          each file fsync'd unless --no-fsync (torch.save does not), and keeps the last
          --keep of them (all when 0), deleting older ones as a trainer's
          save_total_limit does.
  tmpfs   fills a tmpfs: writes --step-mib MiB into a new file in --dir every --every s
          until asked to checkpoint (or --mib is reached), then acknowledges, stops
          writing and holds what it wrote for --linger s.

Every mode holds --hold-mib MiB of anonymous memory, uses the training_watchdog client
the way a training loop would, and writes what it did to the JSON REPORT file: events
`started`, `epoch`, `checkpoint` (with the MiB written so far and the recent write
rate), `done`.
"""
import argparse
import mmap
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"))
import training_watchdog  # noqa: E402
from e2e_report import Report  # noqa: E402

MIB = 1 << 20

p = argparse.ArgumentParser()
p.add_argument("report")
p.add_argument("mode", choices=["epochs", "write", "tmpfs"])
p.add_argument("--file", help="the data set file (epochs)")
p.add_argument("--dir", default=".", help="where files are written (write, tmpfs)")
p.add_argument("--mib", type=int, default=370)
p.add_argument("--epochs", type=int, default=4)
p.add_argument("--mmap", action="store_true", help="epochs: read the data set through mmap (numpy.memmap's way)")
p.add_argument("--file-mib", type=int, default=64)
p.add_argument("--no-fsync", action="store_true", help="write: leave write-back to the kernel")
p.add_argument("--keep", type=int, default=0, help="write: files kept (0: all)")
p.add_argument("--step-mib", type=int, default=5)
p.add_argument("--every", type=float, default=0.1)
p.add_argument("--hold-mib", type=int, default=24)
p.add_argument("--linger", type=float, default=3.0)
args = p.parse_args()

start = time.time()
note = Report(args.report, start).note
training_watchdog.install()
held = bytearray(args.hold_mib * MIB)
for i in range(0, len(held), 4096):
    held[i] = 1
chunk = b"\x5a" * MIB
checkpoints = 0


def answer_request(**fields):
    """Checkpoints (here: just says so) when asked; returns whether it was asked."""
    global checkpoints
    if not training_watchdog.checkpoint_requested():
        return False
    req = training_watchdog.request() or {}
    training_watchdog.acknowledge()
    checkpoints += 1
    note("checkpoint", resource=req.get("resource"), **fields)
    return True


def write_file(path, mib, sync=True):
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(chunk)
        f.flush()
        if sync:
            os.fsync(f.fileno())


note("started")
if args.mode == "epochs":
    write_file(args.file, args.mib)
    note("dataset", mib=args.mib)
    buf = bytearray(MIB)
    for epoch in range(args.epochs):
        total = 0
        with open(args.file, "rb", buffering=0) as f:
            if args.mmap:
                m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
                for off in range(0, len(m), MIB):
                    # One byte a page: every page of the MiB is read.
                    sum(m[off : off + MIB : 4096])
                    total += min(MIB, len(m) - off)
                    answer_request(epoch=epoch)
                m.close()
            else:
                while True:
                    n = f.readinto(buf)
                    if not n:
                        break
                    total += n
                    answer_request(epoch=epoch)
        note("epoch", n=epoch, mib=total // MIB)
elif args.mode == "write":
    written = 0
    n = 0
    while written < args.mib:
        write_file(os.path.join(args.dir, "ckpt-%04d.bin" % n), args.file_mib, not args.no_fsync)
        written += args.file_mib
        if args.keep and n >= args.keep:
            os.remove(os.path.join(args.dir, "ckpt-%04d.bin" % (n - args.keep)))
        n += 1
        answer_request(written_mib=written)
    note("written", mib=written)
else:
    written = 0
    n = 0
    steps = []  # (seconds since start, MiB written) after each step
    files = []
    while written < args.mib:
        if answer_request(written_mib=written, steps=steps[-40:]):
            break
        path = os.path.join(args.dir, "shm-%05d.bin" % n)
        with open(path, "wb") as f:
            for _ in range(args.step_mib):
                f.write(chunk)
        files.append(path)
        written += args.step_mib
        n += 1
        steps.append((time.time() - start, written))
        time.sleep(args.every)
    note("stopped", written_mib=written)
    time.sleep(args.linger)
note("done", checkpoints=checkpoints)

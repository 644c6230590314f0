"""The JSON report the end-to-end test processes write (hog.py, cache.py): their PID,
start time and what they saw, in order, rewritten atomically after every event so the
test can read it at any time."""
import json
import os
import time


class Report:
    def __init__(self, path, start):
        self.path = path
        self.start = start
        self.data = {"pid": os.getpid(), "start": start, "events": []}

    def note(self, kind, **fields):
        fields.update(kind=kind, t=time.time() - self.start)
        self.data["events"].append(fields)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f)
        os.replace(tmp, self.path)

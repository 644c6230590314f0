//! Property tests of what the alerter reads from other processes: `/proc/PID/status`
//! (`SigCgt`, `Tgid`, `PPid`) and the acknowledgement file the training process writes.
//! None may panic on arbitrary bytes. See `docs/testing.md` for the long run.
#![allow(clippy::unwrap_used)]

#[path = "../../../tests/prop_support.rs"]
mod prop_support;

use prop_support::{arbitrary_bytes, config, near_valid};
use proptest::prelude::*;
use watchdog_alerter::request::read_ack;
use watchdog_alerter::sigcgt::catches;
use watchdog_procfs::parse_status;

const STATUS: &[&str] = &[
    "Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nNgid:\t0\nPid:\t4242\nPPid:\t1\nSigQ:\t0/95834\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\nSigBlk:\t0000000000000000\nSigIgn:\t0000000001001000\nSigCgt:\t0000000180000200\n",
    "Name:\tSigCgt: ffffffffffffffff\\nSigCgt:\nTgid:\t1\nPPid:\t0\nSigCgt:\tffffffffffffffff\n",
];
const ACKS: &[&str] = &[
    "{\"pid\":4242,\"time\":\"2026-11-23T08:00:00Z\",\"resource\":\"cgroup_memory\",\"checkpoint\":\"/ckpt/1\"}",
    "{}",
    "[1,2]",
];

proptest! {
    #![proptest_config(config())]

    #[test]
    fn prop_status_arbitrary_and_near_valid(
        text in prop_oneof![
            arbitrary_bytes().prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
            near_valid(STATUS),
        ],
        sig in any::<i32>(),
    ) {
        let fields = parse_status(text.as_bytes());
        let _ = catches(fields.sigcgt.unwrap_or(u64::MAX), sig);
    }

    #[test]
    fn prop_ack_file_arbitrary_bytes(
        bytes in prop_oneof![arbitrary_bytes(), near_valid(ACKS).prop_map(String::into_bytes)],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("req.json.ack");
        std::fs::write(&path, &bytes).unwrap();
        let _ = read_ack(&path);
    }
}

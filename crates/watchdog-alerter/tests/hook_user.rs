//! A hook run as another user, for real: a user made with `useradd`, removed at the end.
//!
//! Its own test binary, because it sets a canary variable in the process environment
//! (nothing else runs in this process when it does).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use watchdog_alerter::hook::{HOOK_GRACE, HookUser, Hooks, USER_HOOK_PATH};

/// A user that exists until dropped (`userdel` also removes its group).
struct TempUser {
    name: String,
}

impl TempUser {
    fn create(home: &Path) -> Option<TempUser> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let name = format!("wdtest_hook_{:x}", nanos ^ std::process::id());
        let out = Command::new("useradd")
            .args(["--no-create-home", "--user-group", "--shell", "/bin/sh"])
            .arg("--home-dir")
            .arg(home)
            .arg(&name)
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!(
                "useradd {name} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            return None;
        }
        Some(TempUser { name })
    }

    fn uid(&self) -> u32 {
        let out = Command::new("id")
            .arg("-u")
            .arg(&self.name)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    }
}

impl Drop for TempUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.name).status();
    }
}

fn env_of(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn run_as(user: &HookUser, cmd: &str) {
    let hooks = Hooks::with_user(Duration::from_secs(60), HOOK_GRACE, Some(user.clone()));
    let env = vec![("WATCHDOG_SEQ".to_string(), "7".to_string())];
    let status = hooks.run(cmd, &env).unwrap().wait().unwrap();
    assert!(status.success(), "{cmd}: {status}");
}

#[test]
fn hook_runs_as_the_targets_user_with_only_its_environment() {
    let root = watchdog_testsupport::is_root();
    let tools = Path::new("/usr/sbin/useradd").exists() || which("useradd").is_some();
    if !watchdog_testsupport::require(root && tools, "root and useradd (to create a user)") {
        return;
    }
    // A variable of the daemon's that must not reach the user's hook.
    // SAFETY: the only test of this binary, and no other thread runs yet.
    unsafe { std::env::set_var("WDTEST_DAEMON_CANARY", "leaked") };

    let scratch = watchdog_testsupport::scratch();
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    if !watchdog_testsupport::require(
        watchdog_testsupport::others_can_reach(scratch.path()),
        "a temporary directory other users can reach",
    ) {
        return;
    }
    let home = scratch.path().join("home");
    let Some(temp_user) = watchdog_testsupport::need(
        TempUser::create(&home),
        "useradd to succeed (to create a user)",
    ) else {
        return;
    };
    let uid = temp_user.uid();
    let user = HookUser::of_uid(uid).unwrap();
    assert_eq!(user.name, temp_user.name);
    assert_eq!(user.home, home);
    assert_eq!(user.shell, PathBuf::from("/bin/sh"));
    assert_ne!(user.gid, 0);
    assert!(user.groups.contains(&user.gid), "{user:?}");

    // Its home, and a directory it can write with home gone.
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(uid), Some(user.gid)).unwrap();
    let out = scratch.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::os::unix::fs::chown(&out, Some(uid), Some(user.gid)).unwrap();

    let cmd = format!(
        "exec > {}/$WATCHDOG_SEQ.$$; id -u; id -g; id -G; pwd; cat /proc/self/oom_score_adj; echo --; env",
        out.display()
    );
    // The service unit protects the daemon from the OOM killer (OOMScoreAdjust=-900); a
    // user's hook must not inherit the daemon's value. Lowering it takes CAP_SYS_RESOURCE,
    // which containers often drop, so the test raises its own to 500 (always allowed) and
    // checks the hook starts at 0 all the same.
    let own_adj = std::fs::read_to_string("/proc/self/oom_score_adj").unwrap();
    std::fs::write("/proc/self/oom_score_adj", "500").unwrap();
    run_as(&user, &cmd);
    std::fs::write("/proc/self/oom_score_adj", own_adj.trim()).unwrap();
    let files: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let meta = std::fs::metadata(&files[0]).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (uid, user.gid));
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let (ids, env) = text.split_once("--\n").unwrap();
    let ids: Vec<&str> = ids.lines().collect();
    assert_eq!(ids[0], uid.to_string(), "{text}");
    assert_eq!(ids[1], user.gid.to_string(), "{text}");
    let groups: Vec<u32> = ids[2].split(' ').map(|g| g.parse().unwrap()).collect();
    let mut want = user.groups.clone();
    want.sort_unstable();
    let mut got = groups.clone();
    got.sort_unstable();
    got.dedup();
    assert_eq!(got, want, "no group of root's: {text}");
    assert_eq!(
        ids[3],
        home.display().to_string(),
        "works in its home: {text}"
    );
    assert_eq!(
        ids[4], "0",
        "the daemon's OOM protection was inherited: {text}"
    );

    let env = env_of(env);
    assert!(!env.contains_key("WDTEST_DAEMON_CANARY"), "{text}");
    let expected = [
        ("PATH", USER_HOOK_PATH.to_string()),
        ("HOME", home.display().to_string()),
        ("USER", user.name.clone()),
        ("LOGNAME", user.name.clone()),
        ("SHELL", "/bin/sh".to_string()),
        ("WATCHDOG_SEQ", "7".to_string()),
    ];
    for (k, v) in &expected {
        assert_eq!(env.get(*k), Some(v), "{k} in {text}");
    }
    // What the shell itself exports is allowed; nothing else.
    let shells = ["PWD", "OLDPWD", "SHLVL", "_"];
    let extra: Vec<&String> = env
        .keys()
        .filter(|k| !expected.iter().any(|(e, _)| e == k) && !shells.contains(&k.as_str()))
        .collect();
    assert!(extra.is_empty(), "variables not the hook's: {extra:?}");

    // No home: it works in `/`.
    std::fs::remove_dir(&home).unwrap();
    for f in &files {
        std::fs::remove_file(f).unwrap();
    }
    run_as(&user, &cmd);
    let text = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .next()
        .unwrap();
    assert_eq!(text.lines().nth(3), Some("/"), "{text}");
    drop(temp_user);
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(tool))
            .find(|f| f.exists())
    })
}

//! `brain launch`: the ranks of a data-parallel run as processes on the CPU (the launcher, the
//! rendezvous and the failure handling are the same as on GPUs; NCCL is not involved here).

mod common;
use common::{brain, text};
use std::time::{Duration, Instant};

/// `brain launch --gpus N script args --device cpu`, run to its end.
fn launch(
    dir: &tempfile::TempDir,
    gpus: usize,
    script: &std::path::Path,
    args: &[&str],
) -> std::process::Output {
    launch_on(dir, gpus, script, args, "cpu")
}

fn launch_on(
    dir: &tempfile::TempDir,
    gpus: usize,
    script: &std::path::Path,
    args: &[&str],
    device: &str,
) -> std::process::Output {
    brain(dir)
        .args(["launch", "--gpus", &gpus.to_string()])
        .arg(script)
        .args(args)
        .args(["--device", device])
        .output()
        .unwrap()
}

/// `brain run script --device cpu`: the same script without the launcher.
fn run_alone(dir: &tempfile::TempDir, script: &std::path::Path) -> std::process::Output {
    run_alone_on(dir, script, &[], "cpu")
}

fn run_alone_on(
    dir: &tempfile::TempDir,
    script: &std::path::Path,
    args: &[&str],
    device: &str,
) -> std::process::Output {
    brain(dir)
        .arg("run")
        .arg(script)
        .args(args)
        .args(["--device", device])
        .output()
        .unwrap()
}

fn write_script(dir: &tempfile::TempDir, body: &str) -> std::path::PathBuf {
    let path = dir.path().join("ranks.rhai");
    std::fs::write(&path, body).unwrap();
    path
}

#[test]
fn every_rank_runs_the_script_and_knows_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let script = write_script(
        &dir,
        "let tag = arg(\"tag\", \"x\", \"a word to print\");\n\
         dist::barrier();\n\
         print(`${tag} rank ${dist::rank()} of ${dist::world_size()} main ${dist::is_main()}`);\n\
         dist::barrier();",
    );
    let out = launch(&dir, 2, &script, &["tag=hello"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("hello rank 0 of 2 main true"), "{stdout}");
    assert!(stdout.contains("hello rank 1 of 2 main false"), "{stdout}");
}

#[test]
fn a_script_run_alone_is_rank_zero_of_one() {
    let dir = tempfile::tempdir().unwrap();
    let script = write_script(
        &dir,
        "dist::barrier(); print(`rank ${dist::rank()} of ${dist::world_size()}`);",
    );
    let out = run_alone(&dir, &script);
    assert!(
        text(&out.stdout).contains("rank 0 of 1"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_failing_rank_stops_the_others_and_is_named() {
    let dir = tempfile::tempdir().unwrap();
    // Rank 1 fails; rank 0 waits at a barrier rank 1 never reaches.
    let script = write_script(
        &dir,
        "if dist::rank() == 1 { throw \"rank one gives up\"; }\ndist::barrier();",
    );
    let start = Instant::now();
    let out = launch(&dir, 2, &script, &[]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("rank one gives up"), "{stderr}");
    assert!(
        stderr.contains("brain launch: rank 1 failed (exit code 1); stopped ranks [0]"),
        "{stderr}"
    );
    assert!(start.elapsed() < Duration::from_secs(30));
}

/// A one-layer model's `train_step`, then "trained" and the loss.
const TRAIN_SCRIPT: &str = "manual_seed(7);\n\
     let model = lm::transformer(#{ vocab: 64, d_model: 16, layers: 1, heads: 2, max_seq_len: 32 });\n\
     let opt = optim::adamw(model.parameters(), #{ lr: 1e-3 });\n\
     let x = randint(0, 64, [2, 8]);\n\
     let loss = model.train_step([x, x], opt);\n\
     print(`trained ${loss.item()}`);";

#[test]
fn train_step_on_several_cpu_ranks_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let script = write_script(&dir, TRAIN_SCRIPT);
    let out = launch(&dir, 2, &script, &[]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(!text(&out.stdout).contains("trained"));
    assert!(
        stderr.contains("cannot be summed across ranks") && stderr.contains("--device cuda"),
        "{stderr}"
    );
}

#[test]
fn train_step_under_a_launch_of_one_takes_the_reducing_path_and_trains() {
    let dir = tempfile::tempdir().unwrap();
    let script = write_script(&dir, TRAIN_SCRIPT);
    let out = launch(&dir, 1, &script, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let launched = text(&out.stdout);
    // The same script alone gives the same loss: a reduction over one rank changes nothing.
    let out = run_alone(&dir, &script);
    let alone = text(&out.stdout);
    let loss = |s: &str| {
        s.lines()
            .find(|l| l.contains("trained"))
            .map(str::to_string)
    };
    assert!(loss(&alone).is_some(), "{alone}\n{}", text(&out.stderr));
    assert_eq!(loss(&launched), loss(&alone));
}

/// Every rank saves; rank 0 alone writes (the file rank 1 names does not appear), and every
/// rank returns from `save` once rank 0's file is there, so each loads it right after.
#[test]
fn a_checkpoint_is_written_by_rank_zero_and_every_rank_returns_once_it_is_there() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let script = write_script(
        &dir,
        "let out = arg(\"out\", \"\", \"folder\");\n\
         let m = lm::transformer(#{ vocab: 40, d_model: 16, layers: 1, heads: 2, max_seq_len: 8, seed: 1 });\n\
         m.save(`${out}/by_rank_${dist::rank()}.safetensors`, #{});\n\
         m.save(`${out}/shared.safetensors`, #{ step: 3 });\n\
         print(`rank ${dist::rank()} loaded step ${lm::load(`${out}/shared.safetensors`).step()}`);",
    );
    let arg = format!("out={}", out_dir.display());
    let out = launch(&dir, 2, &script, &[&arg]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("rank 0 loaded step 3"), "{stdout}");
    assert!(stdout.contains("rank 1 loaded step 3"), "{stdout}");
    assert!(out_dir.join("by_rank_0.safetensors").exists());
    assert!(!out_dir.join("by_rank_1.safetensors").exists());
}

/// Rank 0 cannot write the file (a folder is in its place): every rank's `save` fails, rank
/// 1's naming rank 0's error, instead of rank 1 going on as if the checkpoint were there.
#[test]
fn a_checkpoint_rank_zero_cannot_write_is_an_error_on_every_rank() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("a_folder.safetensors");
    std::fs::create_dir(&blocker).unwrap();
    let script = write_script(
        &dir,
        "let out = arg(\"out\", \"\", \"path\");\n\
         let m = lm::transformer(#{ vocab: 40, d_model: 16, layers: 1, heads: 2, max_seq_len: 8, seed: 1 });\n\
         try { m.save(out, #{}); print(`rank ${dist::rank()} saved`); }\n\
         catch (e) { print(`rank ${dist::rank()} failed: ${e}`); }",
    );
    let arg = format!("out={}", blocker.display());
    let out = launch(&dir, 2, &script, &[&arg]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(!stdout.contains("saved"), "{stdout}");
    assert!(stdout.contains("rank 0 failed"), "{stdout}");
    assert!(
        stdout.contains("rank 1 failed: ") && stdout.contains("rank 0 failed: "),
        "{stdout}"
    );
    let rank1 = stdout
        .lines()
        .find(|l| l.starts_with("rank 1 failed"))
        .unwrap();
    assert!(
        rank1.contains("rank 0 failed") && rank1.contains("a_folder"),
        "rank 1 names rank 0's error: {rank1}"
    );
}

/// ZeRO-1 through the launcher on the GPU (skips without one): a launch of one with the
/// optimizer state sharded reduces through NCCL and steps like a plain run, loss for loss.
#[test]
fn sharded_state_under_a_launch_of_one_trains_like_a_plain_run_on_the_gpu() {
    if rusting_brain::Device::cuda_for_test("sharded_state_under_a_launch_of_one").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = write_script(
        &dir,
        "let shard = arg(\"shard\", false, \"ZeRO-1\");\n\
         manual_seed(7);\n\
         let model = lm::transformer(#{ vocab: 64, d_model: 16, layers: 1, heads: 2, max_seq_len: 32 });\n\
         let opt = optim::adamw(model.parameters(), #{ lr: 1e-2, shard_state: shard });\n\
         let x = randint(0, 64, [2, 8]);\n\
         for i in 0..3 { let loss = model.train_step([x, x], opt); print(`step ${i} loss ${loss.item()}`); }",
    );
    let losses = |out: std::process::Output| {
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
        let lines: Vec<String> = stdout
            .lines()
            .filter(|l| l.contains("loss"))
            .map(str::to_string)
            .collect();
        assert_eq!(lines.len(), 3, "{stdout}");
        lines
    };
    let sharded = losses(launch_on(&dir, 1, &script, &["shard=true"], "cuda"));
    let plain = losses(run_alone_on(&dir, &script, &[], "cuda"));
    assert_eq!(sharded, plain);
}

#[test]
fn each_rank_reads_its_own_shard_of_the_step_windows_by_default() {
    let dir = tempfile::tempdir().unwrap();
    // Each rank compares its default batch with its rows of the whole batch of both ranks.
    let script = write_script(
        &dir,
        "let r = dist::rank();\n\
         io::write_text(`corpus${r}.txt`, \"the cat sat on the mat. the dog sat on the log. a cat and a dog met on the mat.\");\n\
         let tok = text::train_bpe(`corpus${r}.txt`, #{ vocab_size: 280 });\n\
         let tokens = data::token_file(tok, `corpus${r}.txt`, `corpus${r}.tokens`, #{});\n\
         let mine = tokens.batch(3, 2, 4, #{ seed: 5 })[0];\n\
         let whole = tokens.batch(3, 4, 4, #{ seed: 5, shard: 0, shards: 1 })[0];\n\
         let rows = whole.narrow(0, 2 * r, 2);\n\
         if (mine - rows).abs().sum().item() != 0.0 { throw `rank ${r}: not its rows`; }\n\
         print(`rank ${r} read its shard`);",
    );
    let out = launch(&dir, 2, &script, &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("rank 0 read its shard"), "{stdout}");
    assert!(stdout.contains("rank 1 read its shard"), "{stdout}");
}

/// The children of `pid` (Linux's /proc).
#[cfg(target_os = "linux")]
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect()
}

#[cfg(target_os = "linux")]
fn rank_of(pid: u32) -> Option<usize> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|&b| b == 0)
        .filter_map(|kv| std::str::from_utf8(kv).ok())
        .find_map(|kv| kv.strip_prefix("RB_RANK="))
        .and_then(|r| r.parse().ok())
}

#[cfg(target_os = "linux")]
#[test]
fn a_rank_killed_mid_run_makes_the_launcher_exit_naming_it_and_leaves_no_process() {
    let dir = tempfile::tempdir().unwrap();
    // Ranks 0 and 1 wait at a barrier for rank 2, which ends without reaching it.
    let script = write_script(&dir, "if dist::rank() != 2 { dist::barrier(); }");
    let launcher = brain(&dir)
        .args(["launch", "--gpus", "3"])
        .arg(&script)
        .args(["--device", "cpu"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until ranks 0 and 1 are up (rank 2 may already be gone).
    let deadline = Instant::now() + Duration::from_secs(60);
    let waiting = loop {
        let ranks: Vec<(u32, usize)> = children(launcher.id())
            .into_iter()
            .filter_map(|pid| Some((pid, rank_of(pid)?)))
            .filter(|&(_, r)| r < 2)
            .collect();
        if ranks.len() == 2 {
            break ranks;
        }
        assert!(Instant::now() < deadline, "the ranks did not start");
        std::thread::sleep(Duration::from_millis(50));
    };
    let (victim, victim_rank) = waiting[0];
    let survivor = waiting[1].0;
    std::thread::sleep(Duration::from_millis(300));
    let killed = std::process::Command::new("kill")
        .args(["-9", &victim.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let killed_at = Instant::now();
    let out = launcher.wait_with_output().unwrap();
    assert!(killed_at.elapsed() < Duration::from_secs(30));
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("rank {victim_rank} was killed by signal 9")),
        "{stderr}"
    );
    // The survivor was stopped and reaped: no process of that id is left.
    assert!(
        !std::path::Path::new(&format!("/proc/{survivor}")).exists(),
        "rank process {survivor} is still there"
    );
}

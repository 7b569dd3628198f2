//! REPL sessions fed on stdin: state between entries, multi-line entries, auto-printing, and
//! errors that leave the session usable.

mod common;
use common::{repl_session, text};

#[test]
fn variables_and_functions_persist_across_entries() {
    let out = repl_session("let x = 20;\nfn twice(v) { v * 2 }\nprint(twice(x) + 2);\n");
    assert_eq!(text(&out.stdout).trim(), "42");
}

#[test]
fn an_entry_that_does_not_parse_yet_continues_on_the_next_line() {
    let out = repl_session(
        "fn add(a,\n       b) {\n  a + b\n}\nlet m = [1,\n 2];\nprint(add(m[0], m[1]));\n",
    );
    assert_eq!(
        text(&out.stdout).trim(),
        "3",
        "stderr: {}",
        text(&out.stderr)
    );
}

#[test]
fn a_bare_expression_prints_its_value_and_tensors_print_like_pytorch() {
    let out = repl_session("1 + 2\ntensor([[1.0, 2.0], [3.0, 4.0]])\nlet quiet = 5;\n");
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("3\n"), "{stdout}");
    assert!(
        stdout
            .contains("tensor([[1., 2.],\n        [3., 4.]], shape=[2, 2], dtype=f32, device=cpu)"),
        "{stdout}"
    );
    assert_eq!(stdout.lines().count(), 3, "{stdout}");
}

#[test]
fn an_error_is_reported_and_the_session_keeps_its_variables() {
    let out = repl_session("let w = ones([2, 3]);\nw.matmul(ones([2, 3]))\nprint(w.shape);\n");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("matmul: shape mismatch between [2, 3] and [2, 3]"),
        "{stderr}"
    );
    assert!(stderr.contains('^'), "a caret marks the position: {stderr}");
    assert_eq!(text(&out.stdout).trim(), "[2, 3]");
}

#[test]
fn commands_list_variables_and_save_the_accepted_entries() {
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("s.rhai");
    let out = repl_session(&format!(
        "let a = 1;\nlet b = a +* 2;\n:vars\n:save {}\n",
        saved.display()
    ));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("a: i64 = 1"), "{stdout}");
    let script = std::fs::read_to_string(&saved).unwrap();
    assert_eq!(script.trim(), "let a = 1;", "failed entries are not saved");
}

#[test]
fn help_names_a_function_signature_and_example() {
    let out = repl_session(":help matmul\nhelp(\"zeros\")\n");
    let stdout = text(&out.stdout);
    assert!(stdout.contains("a.matmul(b) -> Tensor"), "{stdout}");
    assert!(
        stdout.contains("example: let z = zeros([2, 3]);"),
        "{stdout}"
    );
}

/// Asserts that an entry's error names line 1 and column `col`, says `message`, and draws the
/// entry with a caret under that column.
fn assert_points_at(stderr: &str, entry: &str, col: usize, message: &str) {
    assert!(
        stderr.contains(&format!("error at 1:{col}: {message}")),
        "no `error at 1:{col}: {message}` in\n{stderr}"
    );
    let caret = format!("    {entry}\n    {}^", " ".repeat(col - 1));
    assert!(
        stderr.contains(&caret),
        "no caret under column {col} of `{entry}` in\n{stderr}"
    );
}

#[test]
fn errors_from_every_namespace_and_from_methods_point_at_the_call() {
    let cases: [(&str, usize, &str); 7] = [
        (
            "let ds = data::csv(\"bad.csv\", \"label\");",
            16,
            "csv: bad.csv: row 1",
        ),
        (
            "let t = io::load(\"missing.safetensors\");",
            13,
            "io error on missing.safetensors",
        ),
        ("let o = optim::sgd([1, 2], #{});", 16, "optim::sgd"),
        (
            "let l = nn::cross_entropy(ones([3, 4]), ones([5]));",
            13,
            "cross_entropy",
        ),
        (
            "let m = lm::load(\"missing.safetensors\");",
            13,
            "io error on missing.safetensors",
        ),
        (
            "let y = nn::linear(64, 64).forward(ones([64, 4]));",
            28,
            "Linear(64→64) expects input [..., 64], got [64, 4]",
        ),
        (
            "let z = ones([2, 3]).matmul(ones([2, 3]));",
            22,
            "matmul: shape mismatch",
        ),
    ];
    let mut input = "io::write_text(\"bad.csv\", \"x,label\\n1,a,extra\\n\");\n".to_string();
    for (entry, _, _) in &cases {
        input.push_str(entry);
        input.push('\n');
    }
    let stderr = text(&repl_session(&input).stderr);
    for (entry, col, message) in cases {
        assert_points_at(&stderr, entry, col, message);
    }
}

#[test]
fn item_gives_an_int_for_integer_tensors_and_a_bool_for_bool_tensors() {
    let out = repl_session(
        "type_of(tensor([1, 2]).sum().item())\ntype_of(tensor([1.5]).item())\ntensor([3]).gt(tensor([2])).item()\nnn::mlp([tensor([4]).sum().item(), 3, 2], #{}).parameters().len()\n",
    );
    assert_eq!(
        text(&out.stdout),
        "i64\nf64\ntrue\n4\n",
        "stderr: {}",
        text(&out.stderr)
    );
}

#[test]
fn a_tensor_too_large_for_memory_is_an_error_and_the_session_keeps_its_variables() {
    let out = repl_session(
        "let keep = ones([2]);\nzeros([100000, 100000, 100000])\nzeros([1000000, 1000000])\n\
         let wide = ones([1000000, 1]) + ones([1, 1000000]);\nprint(keep.sum());\n",
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "the session ended: {stderr}");
    for needle in [
        "zeros: out of memory",
        "shape [100000, 100000, 100000] of f32 needs 4000000000000000 bytes",
        "shape [1000000, 1000000] of f32 needs 4000000000000 bytes",
        "add: out of memory",
    ] {
        assert!(stderr.contains(needle), "{needle:?} not in {stderr}");
    }
    assert!(
        text(&out.stdout).contains("tensor(2."),
        "{}",
        text(&out.stdout)
    );
}

/// Every dtype's allocation is checked before it is made: a tensor too large in f64 or i64 is an
/// error naming its dtype, not an abort that ends the session.
#[test]
fn a_tensor_too_large_in_any_dtype_is_an_error_and_the_session_lives() {
    let out = repl_session(
        "let keep = ones([2]);\nzeros([100000, 100000, 100], #{ dtype: \"f64\" })\n\
         zeros([1000000, 1000000], #{ dtype: \"i64\" })\n\
         full([1000000, 1000000], 2.0, #{ dtype: \"f64\" })\nprint(keep.sum());\n",
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "the session ended: {stderr}");
    for needle in [
        "shape [100000, 100000, 100] of f64 needs 8000000000000 bytes",
        "shape [1000000, 1000000] of i64 needs 8000000000000 bytes",
        "full: out of memory",
    ] {
        assert!(stderr.contains(needle), "{needle:?} not in {stderr}");
    }
    assert!(
        text(&out.stdout).contains("tensor(2."),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn a_model_prints_as_its_layer_tree_with_parameter_counts() {
    let out = repl_session("let m = nn::mlp([4, 64, 3]);\nprint(m);\nm\n");
    let tree = "Mlp(\n  (layers): Sequential(\n    (0): Linear(in=4, out=64, bias=true)  320 params\n    \
                (1): ReLU\n    (2): Linear(in=64, out=3, bias=true)  195 params\n  )\n)\nTotal: 515 parameters\n";
    assert_eq!(
        text(&out.stdout),
        format!("{tree}{tree}"),
        "print and the echo show the same tree; stderr: {}",
        text(&out.stderr)
    );
}

#[test]
fn vars_shows_script_type_names_and_tensor_shapes() {
    let out = repl_session(
        "let x = ones([3, 4]);\nlet m = nn::linear(2, 2);\nlet ds = data::spirals(5, #{});\nlet a = 1;\n:vars\n",
    );
    let stdout = text(&out.stdout);
    for line in [
        "x: Tensor [3, 4] f32\n",
        "m: Model\n",
        "ds: Dataset(10 rows, 2 features, 2 classes, features f32, targets i64)\n",
        "a: i64 = 1\n",
    ] {
        assert!(stdout.contains(line), "{line:?} not in\n{stdout}");
    }
    assert!(!stdout.contains("rusting_brain"), "a Rust path: {stdout}");
}

#[test]
fn a_for_loop_over_a_loader_counts_its_batches() {
    let out = repl_session(
        "let ds = data::spirals(25, #{});\n\
         let n = 0; for b in ds.loader(#{ batch_size: 16 }) { n += 1; } print(n);\n\
         let n = 0; for b in ds.loader(#{ batch_size: 16, drop_last: true }) { n += 1; } print(n);\n\
         for batch in ds.loader(#{ batch_size: 16, shuffle: true, seed: 1 }) { print(batch.x.shape); print(batch.y.shape); break; }\n",
    );
    assert_eq!(
        text(&out.stdout),
        "4\n3\n[16, 2]\n[16]\n",
        "stderr: {}",
        text(&out.stderr)
    );
}

/// The peak resident memory of a process, from /proc (Linux).
fn peak_rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

#[test]
fn a_loader_makes_batches_as_the_loop_asks_so_breaking_early_is_cheap() {
    use std::io::{BufRead, BufReader, Write};
    use std::time::Duration;
    // Two million rows in batches of one: an epoch built up front is two million index
    // selects (minutes) before the loop starts; a lazy loader makes one batch.
    let dir = tempfile::tempdir().unwrap();
    let mut child = common::brain(&dir)
        .args(["--device", "cpu"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(
            b"let ds = data::spirals(1000000, #{});\n\
              let n = 0; for b in ds.loader(#{ batch_size: 1 }) { n += 1; break; }\n\
              print(`batches made: ${n}`);\n",
        )
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let first = BufReader::new(stdout).lines().next();
        let _ = send.send(first);
    });
    let first = receive.recv_timeout(Duration::from_secs(60));
    // The session is still open (stdin is), so its peak memory can be read.
    let peak = peak_rss_bytes(child.id());
    let _ = child.kill();
    drop(stdin);
    let _ = child.wait();
    let first = first.expect("no answer within 60 s: the epoch was built before the loop ran");
    assert_eq!(first.unwrap().unwrap(), "batches made: 1");
    assert!(peak < 400 << 20, "the session peaked at {} MiB", peak >> 20);
}

#[test]
fn help_of_a_namespace_lists_each_of_its_functions_with_its_description() {
    let out = repl_session("help(\"nn::\")\n");
    let stdout = text(&out.stdout);
    for line in [
        "nn::mlp(sizes) -> Model — An MLP with ReLU and seed 0.",
        "nn::linear(in, out) -> Model — A Linear layer with a bias, seed 0.",
        "nn::sequential([layers]) -> Model — ",
        "nn::cross_entropy(",
        "nn::dropout(p) -> Model — ",
    ] {
        assert!(stdout.contains(line), "{line:?} not in\n{stdout}");
    }
    assert!(
        stdout.lines().all(|l| l.starts_with("nn::")),
        "only nn:: functions: {stdout}"
    );
}

#[test]
fn model_eval_works_as_in_pytorch() {
    let out =
        repl_session("let m = nn::dropout(0.5);\nm.eval();\nm.training\nm.train();\nm.training\n");
    assert_eq!(
        text(&out.stdout),
        "false\ntrue\n",
        "stderr: {}",
        text(&out.stderr)
    );
}

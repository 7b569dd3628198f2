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

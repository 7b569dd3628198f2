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

//! Decoding options from scripts: beam search (the best sequence, or every hypothesis with its
//! score), speculative decoding with a draft model or prompt lookup, stop strings, and the
//! errors that mixing them gets.

use rhai::{Array, Dynamic, Map};

fn eval(src: &str) -> Result<Dynamic, String> {
    rusting_brain_rhai::new_engine()
        .eval::<Dynamic>(src)
        .map_err(|e| e.to_string())
}

const SETUP: &str = r#"
    let model = lm::transformer(#{ vocab: 20, d_model: 16, layers: 2, heads: 2, kv_heads: 1, max_seq_len: 48, init_std: 0.3, seed: 1 });
    let draft = lm::transformer(#{ vocab: 20, d_model: 16, layers: 1, heads: 2, kv_heads: 1, max_seq_len: 48, init_std: 0.3, seed: 2 });
"#;

fn run(body: &str) -> Result<Dynamic, String> {
    eval(&format!("{SETUP}\n{body}"))
}

fn ints(v: &Dynamic) -> Vec<i64> {
    v.clone()
        .cast::<Array>()
        .iter()
        .map(|x| x.as_int().unwrap())
        .collect()
}

#[test]
fn num_beams_gives_the_best_hypothesis_or_all_of_them_with_scores() {
    let best = run("model.generate([1, 2, 3], #{ num_beams: 3, max_new_tokens: 5 })").unwrap();
    assert_eq!(ints(&best).len(), 5);
    let all = run("model.generate([1, 2, 3], #{ num_beams: 3, max_new_tokens: 5, return_beams: true, early_stopping: \"never\" })")
        .unwrap()
        .cast::<Array>();
    assert_eq!(all.len(), 3);
    let first = all[0].clone().cast::<Map>();
    assert_eq!(ints(&first["ids"]), ints(&best));
    let scores: Vec<f64> = all
        .iter()
        .map(|b| b.clone().cast::<Map>()["score"].as_float().unwrap())
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    let batch = run("model.generate([[1, 2, 3], [4]], #{ num_beams: 2, max_new_tokens: 3 })")
        .unwrap()
        .cast::<Array>();
    assert_eq!(batch.len(), 2);
}

#[test]
fn speculative_decoding_gives_the_plain_greedy_tokens() {
    let out = run(
        "let plain = model.generate([1, 2, 3, 1, 2], #{ temperature: 0.0, max_new_tokens: 12 });
         let drafted = model.generate([1, 2, 3, 1, 2], #{ temperature: 0.0, max_new_tokens: 12, draft: draft, draft_tokens: 3 });
         let itself = model.generate([1, 2, 3, 1, 2], #{ temperature: 0.0, max_new_tokens: 12, draft: model });
         let looked = model.generate([1, 2, 3, 1, 2], #{ temperature: 0.0, max_new_tokens: 12, prompt_lookup: 4 });
         let streamed = []; model.stream([1, 2, 3, 1, 2], #{ temperature: 0.0, max_new_tokens: 12, prompt_lookup: 4 }, |id| { streamed.push(id); true });
         [plain, drafted, itself, looked, streamed]",
    )
    .unwrap()
    .cast::<Array>();
    let plain = ints(&out[0]);
    assert_eq!(plain.len(), 12);
    for (i, other) in out.iter().enumerate().skip(1) {
        assert_eq!(ints(other), plain, "variant {i}");
    }
}

#[test]
fn a_stop_string_ends_the_text_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let setup = format!(
        r#"io::write_text("{d}/c.txt", "the cat sat on the mat. the dog sat on the log. a cat and a dog met on the mat.");
        let tok = text::train_bpe("{d}/c.txt", #{{ vocab_size: 280 }});
        let m = lm::transformer(#{{ vocab: tok.vocab_size, d_model: 16, layers: 1, heads: 2, max_seq_len: 64, init_std: 0.3, seed: 4 }});
        let opts = #{{ max_new_tokens: 16, temperature: 0.0 }};"#,
        d = dir.path().display()
    );
    let free = eval(&format!("{setup} m.generate(tok, \"the cat\", opts)"))
        .unwrap()
        .into_string()
        .unwrap();
    let chars: Vec<char> = free.chars().collect();
    assert!(chars.len() > 8, "{free:?}");
    let stop: String = chars[5..7].iter().collect();
    let want = &free[..free.find(&stop).unwrap()];
    let escaped = stop.replace('\\', "\\\\").replace('"', "\\\"");
    let got = eval(&format!(
        "{setup} opts.stop = [\"{escaped}\"]; m.generate(tok, \"the cat\", opts)"
    ))
    .unwrap()
    .into_string()
    .unwrap();
    assert_eq!(got, want);
    let pieces = eval(&format!(
        "{setup} opts.stop = [\"{escaped}\"]; let p = []; let all = m.stream(tok, \"the cat\", opts, |s| {{ p.push(s); true }}); [p, all]"
    ))
    .unwrap()
    .cast::<Array>();
    let shown: String = pieces[0]
        .clone()
        .cast::<Array>()
        .into_iter()
        .map(|s| s.into_string().unwrap())
        .collect();
    assert_eq!(shown, want);
    assert_eq!(pieces[1].clone().into_string().unwrap(), want);
}

#[test]
fn options_that_do_not_go_together_are_named() {
    let cases = [
        (
            "model.generate([1], #{ num_beams: 2, temperature: 0.7 })",
            "drop temperature",
        ),
        (
            "model.generate([1], #{ num_beams: 2, draft: draft })",
            "pick one",
        ),
        (
            "model.generate([1], #{ length_penalty: 2.0 })",
            "set num_beams above 1",
        ),
        (
            "model.generate([1], #{ draft_tokens: 3 })",
            "speculative-decoding option",
        ),
        (
            "model.generate([1], #{ draft: 3 })",
            "expected a LanguageModel",
        ),
        (
            "model.generate([[1], [2]], #{ prompt_lookup: 3 })",
            "takes one prompt",
        ),
        ("model.generate([1], #{ stop: [\"x\"] })", "stop strings"),
        (
            "model.generate([1], #{ num_beams: 2, early_stopping: \"soon\" })",
            "\"never\"",
        ),
        (
            "model.stream([1], #{ num_beams: 2 }, |id| true)",
            "cannot stream",
        ),
    ];
    for (src, want) in cases {
        let e = run(src).unwrap_err();
        assert!(e.contains(want), "{src}: {e}");
    }
}

/// `max_time: 0.0` ends every sequence after its first token (plain and speculative), a
/// negative time is refused, and beam search, which it does not end, refuses it by name.
#[test]
fn max_time_ends_generation_and_is_refused_where_it_does_nothing() {
    let plain = run("model.generate([[1, 2, 3], [4]], #{ max_time: 0.0, max_new_tokens: 6 })")
        .unwrap()
        .cast::<Array>();
    assert!(plain.iter().all(|ids| ints(ids).len() == 1), "{plain:?}");
    let speculative = run(
        "model.generate([1, 2, 3], #{ max_time: 0.0, max_new_tokens: 6, draft: draft, draft_tokens: 3 })",
    )
    .unwrap();
    assert!(
        (1..=3).contains(&ints(&speculative).len()),
        "{speculative:?}"
    );
    let err = run("model.generate([1, 2], #{ max_time: -1.0 })").unwrap_err();
    assert!(
        err.contains("max_time is seconds, a number at or above 0"),
        "{err}"
    );
    let err = run("model.generate([1, 2], #{ max_time: 1.0, num_beams: 2 })").unwrap_err();
    assert!(
        err.contains("max_time ends sampling and speculative decoding, not beam search"),
        "{err}"
    );
}

/// `logprobs: true` gives each row as `#{ ids, log_probs }`: the same ids as without it, and
/// each token's log-probability as scoring the whole text gives it; beam search, speculative
/// decoding and streams refuse it by name.
#[test]
fn logprobs_score_each_generated_token_under_the_model() {
    let out = run(
        "let plain = model.generate([1, 2, 3], #{ temperature: 0.9, seed: 4, max_new_tokens: 6 });
         let scored = model.generate([1, 2, 3], #{ temperature: 0.9, seed: 4, max_new_tokens: 6, logprobs: true });
         let whole = model.log_probabilities([1, 2, 3] + scored.ids);
         [plain, scored.ids, scored.log_probs, whole]",
    )
    .unwrap()
    .cast::<Array>();
    assert_eq!(ints(&out[0]), ints(&out[1]));
    let floats = |v: &Dynamic| -> Vec<f64> {
        v.clone()
            .cast::<Array>()
            .iter()
            .map(|x| x.as_float().unwrap())
            .collect()
    };
    let (scores, whole) = (floats(&out[2]), floats(&out[3]));
    assert_eq!(scores.len(), 6);
    for (got, want) in scores.iter().zip(&whole[2..]) {
        assert!((got - want).abs() < 1e-4, "{scores:?} vs {whole:?}");
    }
    let batch = run("model.generate([[1, 2], [3]], #{ max_new_tokens: 2, logprobs: true })")
        .unwrap()
        .cast::<Array>();
    assert_eq!(batch.len(), 2);
    for (opts, words) in [
        ("num_beams: 2", "beam search gives each beam's score"),
        ("prompt_lookup: 2", "speculative decoding none"),
    ] {
        let err = run(&format!(
            "model.generate([1, 2], #{{ max_new_tokens: 2, logprobs: true, {opts} }})"
        ))
        .unwrap_err();
        assert!(err.contains(words), "{err}");
    }
    let err =
        run("model.stream([1, 2], #{ max_new_tokens: 2, logprobs: true }, |id| true)").unwrap_err();
    assert!(err.contains("a stream hands out tokens alone"), "{err}");
}

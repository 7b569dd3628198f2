//! Setups that examples share: each macro prefixes an example with the lines that make the
//! values it uses (a corpus and tokenizer, a token file, a tiny language model), so every
//! example runs on its own in a fresh engine and stays small enough to run in the test suite.

/// Prefixes an example with the lines that write a small corpus and train a tokenizer `tok` on
/// it, so the example runs on its own in a fresh engine.
macro_rules! with_tokenizer {
    ($example:expr) => {
        concat!(
            "io::write_text(\"corpus.txt\", \"the cat sat on the mat. the dog sat on the log. a cat and a dog met on the mat.\"); ",
            "let tok = text::train_bpe(\"corpus.txt\", #{ vocab_size: 280 }); ",
            $example
        )
    };
}

/// Prefixes an example with a token file `tokens` of that corpus, split into `train` and `val`.
macro_rules! with_tokens {
    ($example:expr) => {
        $crate::help::with_tokenizer!(concat!(
            "let tokens = data::token_file(tok, \"corpus.txt\", \"corpus.tokens\", #{}); ",
            "let parts = tokens.split(0.5); let train = parts[0]; let val = parts[1]; ",
            $example
        ))
    };
}

/// Prefixes an example with a tiny language model `model` (vocab 64) and ids `x` [2, 8].
macro_rules! with_lm {
    ($example:expr) => {
        concat!(
            "let model = lm::transformer(#{ vocab: 64, d_model: 16, layers: 1, heads: 2, max_seq_len: 32 }); ",
            "let x = randint(0, 64, [2, 8]); ",
            $example
        )
    };
}

/// Prefixes an example with a tokenizer `tok` and a tiny language model `model` over its vocab.
macro_rules! with_tokenizer_and_lm {
    ($example:expr) => {
        $crate::help::with_tokenizer!(concat!(
            "let model = lm::transformer(#{ vocab: tok.vocab_size, d_model: 16, layers: 1, heads: 2, max_seq_len: 64 }); ",
            $example
        ))
    };
}

pub(crate) use {with_lm, with_tokenizer, with_tokenizer_and_lm, with_tokens};

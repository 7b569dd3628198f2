//! A `Tokenizer` around a SentencePiece vocabulary with scores (`spm`), with the stages that
//! llama.cpp's `llama` tokenizer model applies around it, expressed in the pipeline's own
//! terms:
//! - added tokens (llama.cpp's control, unknown and user-defined tokens) are cut out of the
//!   text first, their `lstrip`/`rstrip` swallowing ASCII whitespace only;
//! - each run of text between them gets one space in front (`add_space_prefix`: llama.cpp puts
//!   it at the start and after every token cut out, even before a space already there), then
//!   every space becomes "▁": the normalizer `Sequence[Prepend("▁"), Replace(" ", "▁")]`, which
//!   runs once per run;
//! - no pre-tokenizer: each run is merged whole, as llama.cpp does;
//! - decoding turns "▁" into spaces and `<0xNN>` runs into the characters their bytes spell,
//!   and drops one leading space of the text (with `add_space_prefix`, the one encoding put
//!   there). Special tokens skipped by `decode` are gone before that, so the text after a BOS
//!   loses its space too, as llama-cpp-python's `detokenize` and Hugging Face's LLaMA decoder
//!   have it. (llama.cpp's `llama_detokenize` keeps it there.)

use super::added::{AddedToken, AddedVocab};
use super::decode::{DecodeStep, Decoder};
use super::model::Model;
use super::normalize::{NormalizeStep, Normalizer};
use super::pattern::{Pattern, PatternSource};
use super::pretokenize::{PreTokenizer, SplitBehavior, SplitRule, Step};
use super::spm::SpmModel;
use super::tokenizer::{Parts, Template, Tokenizer};
use crate::Result;

/// SentencePiece's visible space.
const SPACE_MARK: &str = "▁";

/// The settings beside a SentencePiece vocabulary.
#[derive(Clone, Debug, Default)]
pub struct SentencePieceOptions {
    /// Put a space in front of each run of text (GGUF's `tokenizer.ggml.add_space_prefix`).
    pub add_space_prefix: bool,
    /// BOS and EOS around a sequence, for `encode_with_template`.
    pub template: Template,
}

impl Tokenizer {
    /// A tokenizer of `model` that matches the `added` tokens whole in the text, encodes and
    /// decodes as llama.cpp's `llama` tokenizer model.
    pub fn sentencepiece(
        model: SpmModel,
        added: Vec<AddedToken>,
        options: SentencePieceOptions,
    ) -> Result<Tokenizer> {
        let mark_spaces = NormalizeStep::Replace {
            pattern: Pattern::new(PatternSource::Literal(" ".into()))?,
            content: SPACE_MARK.into(),
        };
        let mut normalize = Vec::new();
        if options.add_space_prefix {
            normalize.push(NormalizeStep::Prepend(SPACE_MARK.into()));
        }
        normalize.push(mark_spaces);
        let mut decode = vec![
            DecodeStep::Replace {
                pattern: Pattern::new(PatternSource::Literal(SPACE_MARK.into()))?,
                content: " ".into(),
            },
            DecodeStep::ByteFallback,
            DecodeStep::Fuse,
        ];
        if options.add_space_prefix {
            decode.push(DecodeStep::Strip {
                content: ' ',
                start: 1,
                stop: 0,
            });
        }
        // llama.cpp merges over the whole text; where no token crosses from a word into the
        // marks of the next (LLaMA's, Phi-3's vocabularies), the words are cut apart first, which
        // gives the same ids and lets each word's ids be cached (5x faster on long text).
        let mut pre = Vec::new();
        if model.words_merge_apart() {
            let before_marks =
                SplitRule::regex(&format!("{SPACE_MARK}+"), SplitBehavior::MergedWithNext)?;
            pre.push(Step::Split(before_marks));
        }
        Ok(Tokenizer::from_parts(Parts {
            added: AddedVocab::new(added)?.with_ascii_strip(),
            normalizer: Normalizer::new(normalize),
            pre: PreTokenizer::new(pre)?,
            model: Model::Spm(model),
            template: options.template,
            post_processor_json: serde_json::Value::Null,
            decoder: Decoder {
                steps: Some(decode),
            },
            limits: Default::default(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::StreamDecoder;

    /// Letters, "▁" and a few merges, `<s>`/`</s>` as special tokens, bytes for "é" (C3 A9).
    fn tokenizer(add_space_prefix: bool) -> Tokenizer {
        let vocab = [
            ("<unk>", 0.0),
            ("<s>", 0.0),
            ("</s>", 0.0),
            ("<0xC3>", 0.0),
            ("<0xA9>", 0.0),
            ("▁", -1.0),
            ("h", -1.0),
            ("i", -1.0),
            ("x", -1.0),
            ("hi", -2.0),
            ("▁hi", -3.0),
            ("▁x", -4.0),
        ];
        let (tokens, scores) = vocab.iter().map(|&(t, s)| (t.to_string(), s)).unzip();
        let model = SpmModel::new(tokens, scores).unwrap();
        let added = vec![
            AddedToken::special(0, "<unk>"),
            AddedToken::special(1, "<s>"),
            AddedToken::special(2, "</s>"),
        ];
        let options = SentencePieceOptions {
            add_space_prefix,
            template: Template {
                prefix: vec![1],
                suffix: vec![],
            },
        };
        Tokenizer::sentencepiece(model, added, options).unwrap()
    }

    fn names(tok: &Tokenizer, ids: &[u32]) -> Vec<String> {
        ids.iter().map(|&i| tok.id_to_token(i).unwrap()).collect()
    }

    #[test]
    fn each_run_of_text_gets_a_space_in_front_even_before_a_space() {
        let tok = tokenizer(true);
        let ids = tok.encode("hi x</s> hi").unwrap();
        assert_eq!(
            names(&tok, &ids),
            ["▁hi", "▁x", "</s>", "▁", "▁hi"],
            "{ids:?}"
        );
        assert_eq!(tok.encode_with_template("hi").unwrap(), [1, 10]);
        assert_eq!(tok.encode("").unwrap(), Vec::<u32>::new());
    }

    #[test]
    fn without_add_space_prefix_only_real_spaces_are_marked() {
        let tok = tokenizer(false);
        let ids = tok.encode("hi x</s>x").unwrap();
        assert_eq!(names(&tok, &ids), ["hi", "▁x", "</s>", "x"]);
        // Nothing was put in front, so decoding takes nothing away.
        assert_eq!(
            tok.decode(&tok.encode(" hi").unwrap(), false).unwrap(),
            " hi"
        );
    }

    #[test]
    fn decode_restores_spaces_and_fallback_bytes_and_drops_the_added_space() {
        let tok = tokenizer(true);
        let ids = tok.encode_with_template(" hi é").unwrap();
        assert_eq!(
            names(&tok, &ids),
            ["<s>", "▁", "▁hi", "▁", "<0xC3>", "<0xA9>"]
        );
        assert_eq!(tok.decode(&ids, true).unwrap(), " hi é");
        assert_eq!(tok.decode(&ids, false).unwrap(), "<s>  hi é");
    }

    #[test]
    fn streaming_decode_joins_to_the_whole_decode() {
        let tok = tokenizer(true);
        let ids = tok.encode_with_template("hi é x</s>").unwrap();
        for skip in [true, false] {
            let mut stream = StreamDecoder::new(tok.clone(), skip);
            let mut text = String::new();
            for &id in &ids {
                text.push_str(&stream.push(id).unwrap());
            }
            text.push_str(&stream.finish());
            assert_eq!(text, tok.decode(&ids, skip).unwrap());
        }
    }

    #[test]
    fn a_sentencepiece_tokenizer_is_not_written_as_tokenizer_json() {
        let err = tokenizer(true).to_json_string().unwrap_err().to_string();
        assert!(err.contains("SentencePiece"), "{err}");
    }
}

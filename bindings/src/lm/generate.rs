//! Generation from scripts: an options map becomes a `Plan` (sampling or greedy, beam search,
//! or speculative decoding with a draft model or prompt lookup), prompts come as token-id
//! arrays (one, or a batch), and streaming goes through a Rhai closure called per token.

use super::model::{ids_of, ids_to_array, Lm};
use crate::error::{guard, runtime_error, RhaiResult};
use rhai::{Array, Dynamic, FnPtr, Map, NativeCallContext, INT};
use rusting_brain::models::transformer_lm::generate::{
    self, Beam, BeamOptions, Drafter, EarlyStopping, Flow, GenerateOptions, SamplingOptions, Scored,
};

crate::options! {
    /// The options that only sampling reads (beam search picks by score), then the rest. Those
    /// a mode alone reads have no default, so `plan` sees which were given.
    struct GenerateOpts {
        temperature: f64,
        top_k: usize,
        top_p: f64,
        min_p: f64,
        repetition_penalty: f64,
        presence_penalty: f64,
        frequency_penalty: f64,
        seed: INT,
        max_new_tokens: usize = 64,
        /// A token id or string, or an array of them.
        stop: Dynamic,
        cuda_graph: bool = true,
        /// Seconds after which generation ends (checked after each token).
        max_time: f64,
        num_beams: usize = 1,
        length_penalty: f64,
        /// true, false or "never".
        early_stopping: Dynamic,
        return_beams: bool,
        /// A LanguageModel.
        draft: Dynamic,
        draft_tokens: usize,
        prompt_lookup: usize,
        max_ngram: usize,
        /// Each new token's log-probability beside it.
        logprobs: bool = false,
    }
}

/// What one generation call does.
pub struct Plan {
    /// Length, sampling, stop ids and the CUDA-graph switch (beam search reads the length, the
    /// stop ids and the switch).
    pub opts: GenerateOptions,
    /// Stop strings (text generation only).
    pub stop_strings: Vec<String>,
    pub mode: Mode,
    /// Each token's log-probability beside it (greedy and sampled generation only).
    pub scored: bool,
}

pub enum Mode {
    /// One token at a time, greedy or sampled.
    Plain,
    Beams {
        num_beams: usize,
        length_penalty: f64,
        early_stopping: EarlyStopping,
        /// Every hypothesis with its score, not only the best text.
        all: bool,
    },
    Speculative(Draft),
}

pub enum Draft {
    Model { lm: Lm, tokens: usize },
    Lookup { tokens: usize, max_ngram: usize },
}

/// What a run gives back.
pub enum Outcome {
    Tokens(Vec<Vec<u32>>),
    Beams(Vec<Vec<Beam>>),
    Scored(Scored),
}

pub fn plan(what: &str, opts: Map) -> RhaiResult<Plan> {
    let o = GenerateOpts::parse(what, opts)?;
    let d = SamplingOptions::default();
    let sampling_given = [
        ("temperature", o.temperature.is_some()),
        ("top_k", o.top_k.is_some()),
        ("top_p", o.top_p.is_some()),
        ("min_p", o.min_p.is_some()),
        ("repetition_penalty", o.repetition_penalty.is_some()),
        ("presence_penalty", o.presence_penalty.is_some()),
        ("frequency_penalty", o.frequency_penalty.is_some()),
        ("seed", o.seed.is_some()),
    ];
    // Without a seed, draw one from the script's generator: runs differ, and `manual_seed`
    // makes them repeat.
    let seed = match o.seed {
        Some(seed) => seed as u64,
        None => rusting_brain::random::with_default(|g| {
            let w = g.next_u32s(2);
            (w[0] as u64) << 32 | w[1] as u64
        }),
    };
    let sampling = SamplingOptions {
        temperature: o.temperature.unwrap_or(d.temperature),
        top_k: o.top_k.unwrap_or(d.top_k),
        top_p: o.top_p.unwrap_or(d.top_p),
        min_p: o.min_p.unwrap_or(d.min_p),
        repetition_penalty: o.repetition_penalty.unwrap_or(d.repetition_penalty),
        presence_penalty: o.presence_penalty.unwrap_or(d.presence_penalty),
        frequency_penalty: o.frequency_penalty.unwrap_or(d.frequency_penalty),
        seed,
    };
    let (stop_tokens, stop_strings) = stops(o.stop.as_ref(), what)?;
    let max_time = match o.max_time {
        Some(t) if !(t.is_finite() && t >= 0.0) => {
            return Err(runtime_error(format!(
                "{what}: max_time is seconds, a number at or above 0; got {t}"
            )))
        }
        t => t.map(std::time::Duration::from_secs_f64),
    };
    let opts = GenerateOptions {
        max_new_tokens: o.max_new_tokens,
        sampling,
        stop_tokens,
        cuda_graph: o.cuda_graph,
        max_time,
    };
    let num_beams = o.num_beams;
    let speculative = o.draft.is_some() || o.prompt_lookup.is_some();
    let mode = if num_beams > 1 {
        if speculative {
            return Err(runtime_error(format!(
                "{what}: num_beams and speculative decoding (draft, prompt_lookup) do not go together; pick one"
            )));
        }
        let given: Vec<&str> = sampling_given
            .iter()
            .filter(|(_, given)| *given)
            .map(|(k, _)| *k)
            .collect();
        if !given.is_empty() {
            return Err(runtime_error(format!(
                "{what}: beam search keeps the most likely sequences and takes no sampling options; drop {}",
                given.join(", ")
            )));
        }
        if o.max_time.is_some() {
            return Err(runtime_error(format!(
                "{what}: max_time ends sampling and speculative decoding, not beam search; drop it or num_beams"
            )));
        }
        Mode::Beams {
            num_beams,
            length_penalty: o.length_penalty.unwrap_or(1.0),
            early_stopping: early_stopping(o.early_stopping.as_ref(), what)?,
            all: o.return_beams.unwrap_or(false),
        }
    } else if speculative {
        Mode::Speculative(draft(
            o.draft,
            o.prompt_lookup,
            o.draft_tokens,
            o.max_ngram,
            what,
        )?)
    } else {
        Mode::Plain
    };
    let beam_only = [
        ("length_penalty", o.length_penalty.is_some()),
        ("early_stopping", o.early_stopping.is_some()),
        ("return_beams", o.return_beams.is_some()),
    ];
    if !matches!(mode, Mode::Beams { .. }) {
        if let Some((k, _)) = beam_only.iter().find(|(_, given)| *given) {
            return Err(runtime_error(format!(
                "{what}: {k} is a beam-search option; set num_beams above 1"
            )));
        }
    }
    if !matches!(mode, Mode::Speculative(_)) {
        if let Some((k, _)) = [
            ("draft_tokens", o.draft_tokens.is_some()),
            ("max_ngram", o.max_ngram.is_some()),
        ]
        .iter()
        .find(|(_, given)| *given)
        {
            return Err(runtime_error(format!(
                "{what}: {k} is a speculative-decoding option; give a draft model (draft) or prompt_lookup"
            )));
        }
    }
    if o.logprobs && !matches!(mode, Mode::Plain) {
        return Err(runtime_error(format!(
            "{what}: logprobs scores greedy and sampled tokens; beam search gives each beam's score (return_beams), and speculative decoding none"
        )));
    }
    Ok(Plan {
        opts,
        stop_strings,
        mode,
        scored: o.logprobs,
    })
}

/// `stop`: token ids and, for text generation, strings.
fn stops(stop: Option<&Dynamic>, what: &str) -> RhaiResult<(Vec<u32>, Vec<String>)> {
    let Some(v) = stop else {
        return Ok((Vec::new(), Vec::new()));
    };
    let items: Array = match v.read_lock::<Array>() {
        Some(a) => a.clone(),
        None => vec![v.clone()],
    };
    let (mut ids, mut strings) = (Vec::new(), Vec::new());
    for item in &items {
        if let Some(s) = item.read_lock::<rhai::ImmutableString>() {
            strings.push(s.to_string());
        } else {
            ids.extend(ids_of(&vec![item.clone()], &format!("{what} option stop"))?);
        }
    }
    Ok((ids, strings))
}

/// `early_stopping`: true, false (the default heuristic) or "never".
fn early_stopping(v: Option<&Dynamic>, what: &str) -> RhaiResult<EarlyStopping> {
    let Some(v) = v else {
        return Ok(EarlyStopping::Heuristic);
    };
    if let Ok(b) = v.as_bool() {
        return Ok(if b {
            EarlyStopping::WhenFull
        } else {
            EarlyStopping::Heuristic
        });
    }
    match v
        .read_lock::<rhai::ImmutableString>()
        .as_deref()
        .map(|s| s.as_str())
    {
        Some("never") => Ok(EarlyStopping::Never),
        _ => Err(runtime_error(format!(
            "{what} option early_stopping: expected true, false or \"never\", got {v}"
        ))),
    }
}

/// A draft model (`draft`, with `draft_tokens`) or prompt lookup (`prompt_lookup` tokens of
/// n-grams up to `max_ngram`).
fn draft(
    draft: Option<Dynamic>,
    prompt_lookup: Option<usize>,
    draft_tokens: Option<usize>,
    max_ngram: Option<usize>,
    what: &str,
) -> RhaiResult<Draft> {
    match (draft, prompt_lookup) {
        (Some(_), Some(_)) => Err(runtime_error(format!(
            "{what}: draft and prompt_lookup are two ways to draft; pick one"
        ))),
        (Some(d), None) => {
            let lm = d.clone().try_cast::<Lm>().ok_or_else(|| {
                runtime_error(format!(
                    "{what} option draft: expected a LanguageModel (a smaller model with the same vocabulary), got {}",
                    d.type_name()
                ))
            })?;
            Ok(Draft::Model {
                lm,
                tokens: draft_tokens.unwrap_or(4),
            })
        }
        (None, lookup) => Ok(Draft::Lookup {
            tokens: lookup.unwrap_or(10),
            max_ngram: max_ngram.unwrap_or(2),
        }),
    }
}

/// One prompt (an array of ids) or a batch (an array of arrays).
pub fn prompts_of(v: &Array, what: &str) -> RhaiResult<(Vec<Vec<u32>>, bool)> {
    if v.first().is_some_and(|f| f.is_array()) {
        let rows = v
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let arr = p.read_lock::<Array>().ok_or_else(|| {
                    runtime_error(format!("{what}: prompt {i} is not an array of ids"))
                })?;
                ids_of(&arr, &format!("{what} prompt {i}"))
            })
            .collect::<RhaiResult<Vec<_>>>()?;
        Ok((rows, true))
    } else {
        Ok((vec![ids_of(v, what)?], false))
    }
}

/// Runs `plan` after `prompts`, calling `on_token(row, id)` per token where the tokens come
/// one at a time (not in beam search); the closure's `false` ends that row. Rhai errors from
/// the closure stop everything and come back as they were.
pub fn run(
    m: &Lm,
    prompts: &[Vec<u32>],
    plan: &Plan,
    mut on_token: impl FnMut(usize, u32) -> RhaiResult<bool>,
) -> RhaiResult<Outcome> {
    let model = m.lock();
    let mut script_error = None;
    let mut flow = |row: usize, tok: u32| match on_token(row, tok) {
        Ok(true) => Ok(Flow::Continue),
        Ok(false) => Ok(Flow::Stop),
        Err(e) => {
            script_error = Some(e);
            Err(rusting_brain::Error::Cancelled)
        }
    };
    let result = match &plan.mode {
        Mode::Plain if plan.scored => {
            guard(|| generate::generate_scored(&model, prompts, &plan.opts, &mut flow))
                .map(Outcome::Scored)
        }
        Mode::Plain => guard(|| generate::generate(&model, prompts, &plan.opts, &mut flow))
            .map(Outcome::Tokens),
        Mode::Beams {
            num_beams,
            length_penalty,
            early_stopping,
            ..
        } => {
            let opts = BeamOptions {
                num_beams: *num_beams,
                max_new_tokens: plan.opts.max_new_tokens,
                length_penalty: *length_penalty,
                early_stopping: *early_stopping,
                stop_tokens: plan.opts.stop_tokens.clone(),
                cuda_graph: plan.opts.cuda_graph,
            };
            guard(|| generate::beam_search(&model, prompts, &opts)).map(Outcome::Beams)
        }
        Mode::Speculative(draft) => {
            if prompts.len() != 1 {
                return Err(runtime_error(format!(
                    "speculative decoding takes one prompt, got {}; run the prompts one by one",
                    prompts.len()
                )));
            }
            // The draft may be the target itself (a test of the machinery): one lock.
            let other;
            let drafter = match draft {
                Draft::Model { lm, tokens } => Drafter::Model {
                    model: if lm.same(m) {
                        &model
                    } else {
                        other = lm.lock();
                        &other
                    },
                    tokens: *tokens,
                },
                Draft::Lookup { tokens, max_ngram } => Drafter::PromptLookup {
                    tokens: *tokens,
                    max_ngram: *max_ngram,
                },
            };
            guard(|| {
                generate::generate_speculative(&model, drafter, &prompts[0], &plan.opts, &mut |t| {
                    flow(0, t)
                })
            })
            .map(|(tokens, _)| Outcome::Tokens(vec![tokens]))
        }
    };
    match script_error {
        Some(e) => Err(e),
        None => result,
    }
}

/// Refuses stop strings where no tokenizer turns tokens into text.
fn ids_only(plan: &Plan, what: &str) -> RhaiResult<()> {
    if plan.stop_strings.is_empty() {
        return Ok(());
    }
    Err(runtime_error(format!(
        "{what}: stop strings ({:?}) need text: call model.{what}(tok, text, opts), or give stop ids",
        plan.stop_strings
    )))
}

/// `model.generate(ids, opts)`: new ids for one prompt, or an array of them for a batch.
pub fn generate_ids(m: &mut Lm, prompt: Array, opts: Map) -> RhaiResult<Dynamic> {
    let plan = plan("generate", opts)?;
    ids_only(&plan, "generate")?;
    let (prompts, batched) = prompts_of(&prompt, "generate")?;
    let rows: Vec<Dynamic> = match run(m, &prompts, &plan, |_, _| Ok(true))? {
        Outcome::Tokens(out) => out
            .iter()
            .map(|o| Dynamic::from_array(ids_to_array(o)))
            .collect(),
        Outcome::Scored(scored) => scored_rows(&scored, |_| Ok(None))?,
        Outcome::Beams(beams) => beams
            .iter()
            .map(|b| {
                beams_value(
                    &plan,
                    b,
                    |beam| Ok(Dynamic::from_array(ids_to_array(&beam.tokens))),
                    "ids",
                )
            })
            .collect::<RhaiResult<_>>()?,
    };
    Ok(one_or_batch(rows, batched))
}

/// Each row of a scored run as `#{ ids, log_probs }`, with `text` first where `text` gives one.
pub fn scored_rows(
    scored: &Scored,
    mut text: impl FnMut(usize) -> RhaiResult<Option<String>>,
) -> RhaiResult<Vec<Dynamic>> {
    scored
        .tokens
        .iter()
        .zip(&scored.log_probs)
        .enumerate()
        .map(|(row, (ids, lps))| {
            let mut map = Map::new();
            if let Some(t) = text(row)? {
                map.insert("text".into(), Dynamic::from(t));
            }
            map.insert("ids".into(), Dynamic::from_array(ids_to_array(ids)));
            let lps = lps.iter().map(|&lp| Dynamic::from_float(lp)).collect();
            map.insert("log_probs".into(), Dynamic::from_array(lps));
            Ok(Dynamic::from_map(map))
        })
        .collect()
}

/// One row's beams as the script sees them: the best one's `value`, or under return_beams
/// every hypothesis as `#{ <key>: value, ids, score }`.
pub fn beams_value(
    plan: &Plan,
    beams: &[Beam],
    value: impl Fn(&Beam) -> RhaiResult<Dynamic>,
    key: &str,
) -> RhaiResult<Dynamic> {
    let all = matches!(plan.mode, Mode::Beams { all: true, .. });
    if !all {
        return match beams.first() {
            Some(b) => value(b),
            None => Ok(Dynamic::UNIT),
        };
    }
    let list = beams
        .iter()
        .map(|b| {
            let mut map = Map::new();
            map.insert(key.into(), value(b)?);
            map.insert("ids".into(), Dynamic::from_array(ids_to_array(&b.tokens)));
            map.insert("score".into(), Dynamic::from_float(b.score));
            Ok(Dynamic::from_map(map))
        })
        .collect::<RhaiResult<Array>>()?;
    Ok(Dynamic::from_array(list))
}

/// The first row alone for one prompt, an array of rows for a batch.
pub fn one_or_batch(mut rows: Vec<Dynamic>, batched: bool) -> Dynamic {
    if batched {
        Dynamic::from_array(rows)
    } else {
        rows.swap_remove(0)
    }
}

/// `model.stream(ids, opts, |id| ...)`: the closure gets each new id; returning `false` stops.
pub fn stream_ids(
    ctx: NativeCallContext,
    m: &mut Lm,
    prompt: Array,
    opts: Map,
    f: FnPtr,
) -> RhaiResult<Array> {
    let plan = plan("stream", opts)?;
    ids_only(&plan, "stream")?;
    refuse_beams(&plan, "stream")?;
    let prompts = vec![ids_of(&prompt, "stream")?];
    let out = run(m, &prompts, &plan, |_, tok| {
        let r: Dynamic = f.call_within_context(&ctx, (Dynamic::from_int(tok as INT),))?;
        Ok(r.as_bool().unwrap_or(true))
    })?;
    match out {
        Outcome::Tokens(t) => Ok(ids_to_array(&t[0])),
        Outcome::Beams(_) | Outcome::Scored(_) => unreachable!("refused above"),
    }
}

/// Streaming hands out tokens as they come; a beam search knows its best text only at the
/// end, and a stream's closure has no place for scores.
pub fn refuse_beams(plan: &Plan, what: &str) -> RhaiResult<()> {
    if plan.scored {
        return Err(runtime_error(format!(
            "{what}: logprobs is an option of generate (which returns #{{ ids, log_probs }}); a stream hands out tokens alone"
        )));
    }
    match plan.mode {
        Mode::Beams { .. } => Err(runtime_error(format!(
            "{what}: beam search cannot stream (its best sequence is known only at the end); use generate with num_beams"
        ))),
        _ => Ok(()),
    }
}

/// `model.log_probabilities(ids)`: log p(id_i | ids before it) for i >= 1.
pub fn log_probabilities(m: &mut Lm, ids: Array) -> RhaiResult<Array> {
    let ids = ids_of(&ids, "log_probabilities")?;
    let model = m.lock();
    let lp = guard(|| generate::log_probabilities(&model, &ids))?;
    Ok(lp.into_iter().map(Dynamic::from_float).collect())
}

//! Generation with a tokenizer: prompts and results as text, the tokenizer's end-of-text token
//! as the default stop, and streaming of complete UTF-8 pieces (a character split across tokens
//! is printed once its last byte arrives).

use super::generate::{
    beams_value, one_or_batch, plan, refuse_beams, run, scored_rows, Mode, Outcome, Plan,
};
use super::model::Lm;
use crate::error::{guard, runtime_error, RhaiResult};
use rhai::{Array, Dynamic, FnPtr, Map, NativeCallContext};
use rusting_brain::text::chat_template::ChatTemplate;
use rusting_brain::text::{StopStrings, Tokenizer};

/// The plan of a text call: the tokenizer's end-of-text token stops unless stop ids are given.
fn text_plan(what: &str, opts: Map, tok: &Tokenizer) -> RhaiResult<Plan> {
    let mut plan = plan(what, opts)?;
    if plan.opts.stop_tokens.is_empty() {
        plan.opts.stop_tokens.extend(tok.eos_id());
    }
    if matches!(plan.mode, Mode::Beams { .. }) && !plan.stop_strings.is_empty() {
        return Err(runtime_error(format!(
            "{what}: beam search ends hypotheses at stop ids only, not at stop strings ({:?})",
            plan.stop_strings
        )));
    }
    Ok(plan)
}

/// One text cutter per row, each streaming the row's text and cutting it at a stop string.
fn cutters(tok: &Tokenizer, plan: &Plan, rows: usize) -> RhaiResult<Vec<StopStrings>> {
    (0..rows)
        .map(|_| guard(|| StopStrings::new(tok.clone(), true, plan.stop_strings.clone())))
        .collect()
}

fn prompts(tok: &Tokenizer, prompt: &Dynamic) -> RhaiResult<(Vec<Vec<u32>>, bool)> {
    if let Some(s) = prompt.read_lock::<rhai::ImmutableString>() {
        return Ok((vec![guard(|| tok.encode(&s))?], false));
    }
    let arr = prompt.read_lock::<Array>().ok_or_else(|| {
        runtime_error(format!(
            "generate: the prompt must be a string or an array of strings, got {}",
            prompt.type_name()
        ))
    })?;
    let rows = arr
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let s = p.read_lock::<rhai::ImmutableString>().ok_or_else(|| {
                runtime_error(format!(
                    "generate: prompt {i} is a {}, not a string",
                    p.type_name()
                ))
            })?;
            guard(|| tok.encode(&s))
        })
        .collect::<RhaiResult<Vec<_>>>()?;
    Ok((rows, true))
}

/// `model.generate(tok, "prompt" | ["a", "b"], opts)`: the generated text (prompt excluded),
/// cut before the first stop string.
pub fn generate_text(
    m: &mut Lm,
    tok: Tokenizer,
    prompt: Dynamic,
    opts: Map,
) -> RhaiResult<Dynamic> {
    let plan = text_plan("generate", opts, &tok)?;
    let (rows, batched) = prompts(&tok, &prompt)?;
    let mut cut = cutters(&tok, &plan, rows.len())?;
    let watch = !plan.stop_strings.is_empty();
    let out = run(m, &rows, &plan, |row, id| {
        Ok(!watch || !guard(|| cut[row].push(id))?.stop)
    })?;
    let texts: Vec<Dynamic> = match out {
        Outcome::Tokens(_) if watch => cut
            .iter_mut()
            .map(|c| {
                c.finish();
                Dynamic::from(c.text().to_string())
            })
            .collect(),
        Outcome::Tokens(out) => out
            .iter()
            .map(|ids| guard(|| tok.decode(ids, true)).map(Dynamic::from))
            .collect::<RhaiResult<_>>()?,
        // A stop string cuts the text; the ids and scores stay whole (the tokens that made it).
        Outcome::Scored(scored) => scored_rows(&scored, |row| match watch {
            true => {
                cut[row].finish();
                Ok(Some(cut[row].text().to_string()))
            }
            false => guard(|| tok.decode(&scored.tokens[row], true)).map(Some),
        })?,
        Outcome::Beams(beams) => beams
            .iter()
            .map(|b| {
                beams_value(
                    &plan,
                    b,
                    |beam| guard(|| tok.decode(&beam.tokens, true)).map(Dynamic::from),
                    "text",
                )
            })
            .collect::<RhaiResult<_>>()?,
    };
    Ok(one_or_batch(texts, batched))
}

/// `model.stream(tok, "prompt", opts, |piece| ...)`: calls the closure with each new piece of
/// text; returns the whole generated text. The closure's `false` stops; so does a stop string,
/// of which no part is ever handed to the closure.
pub fn stream_text(
    ctx: NativeCallContext,
    m: &mut Lm,
    tok: Tokenizer,
    prompt: &str,
    opts: Map,
    f: FnPtr,
) -> RhaiResult<String> {
    let plan = text_plan("stream", opts, &tok)?;
    refuse_beams(&plan, "stream")?;
    let ids = guard(|| tok.encode(prompt))?;
    stream_pieces(m, &tok, ids, &plan, closure(&ctx, &f))
}

/// Calls a script's closure with a piece of text; its `false` stops.
fn closure<'a>(
    ctx: &'a NativeCallContext,
    f: &'a FnPtr,
) -> impl FnMut(String) -> RhaiResult<bool> + 'a {
    move |piece| {
        let r: Dynamic = f.call_within_context(ctx, (Dynamic::from(piece),))?;
        Ok(r.as_bool().unwrap_or(true))
    }
}

/// Generates after `ids`, handing each new piece of text (never empty, never part of a stop
/// string) to `show`; returns the text.
fn stream_pieces(
    m: &Lm,
    tok: &Tokenizer,
    ids: Vec<u32>,
    plan: &Plan,
    mut show: impl FnMut(String) -> RhaiResult<bool>,
) -> RhaiResult<String> {
    let mut cut = cutters(tok, plan, 1)?.remove(0);
    let mut hand = |piece: String| match piece.is_empty() {
        true => Ok(true),
        false => show(piece),
    };
    if let Outcome::Beams(beams) = run(m, &[ids], plan, |_, id| {
        let piece = guard(|| cut.push(id))?;
        let go_on = hand(piece.text)?;
        Ok(go_on && !piece.stop)
    })? {
        let best = beams[0].first().map_or(&[][..], |b| &b.tokens[..]);
        return guard(|| tok.decode(best, true));
    }
    hand(cut.finish())?;
    Ok(cut.text().to_string())
}

/// The conversation rendered with its generation prompt, as ids (the template writes any BOS
/// itself), and the plan, stopping where the template ends a turn unless stop ids are given.
fn chat_prompt(
    tok: &Tokenizer,
    template: &ChatTemplate,
    messages: &Array,
    opts: Map,
    what: &str,
) -> RhaiResult<(Vec<u32>, Plan)> {
    let mut plan = plan(what, opts)?;
    if plan.scored {
        return Err(runtime_error(format!(
            "{what}: logprobs is an option of generate (which returns #{{ text, ids, log_probs }}); a chat reply is its text"
        )));
    }
    if plan.opts.stop_tokens.is_empty() {
        plan.opts.stop_tokens = template.stop_ids(tok);
    }
    let list = crate::text::chat::messages(messages)?;
    let prompt = guard(|| template.render(&list, true))?;
    Ok((guard(|| tok.encode(&prompt))?, plan))
}

/// `model.chat(tok, template, messages, opts)`: the assistant's reply to the conversation.
pub fn chat(
    m: &mut Lm,
    tok: Tokenizer,
    template: ChatTemplate,
    messages: Array,
    opts: Map,
) -> RhaiResult<String> {
    let (ids, plan) = chat_prompt(&tok, &template, &messages, opts, "chat")?;
    stream_pieces(m, &tok, ids, &plan, |_| Ok(true))
}

/// `model.chat(tok, template, messages, opts, |piece| ...)`: the reply, streamed.
pub fn chat_stream(
    ctx: NativeCallContext,
    m: &mut Lm,
    tok: Tokenizer,
    template: ChatTemplate,
    messages: Array,
    opts: Map,
    f: FnPtr,
) -> RhaiResult<String> {
    let (ids, plan) = chat_prompt(&tok, &template, &messages, opts, "chat")?;
    refuse_beams(&plan, "chat")?;
    stream_pieces(m, &tok, ids, &plan, closure(&ctx, &f))
}

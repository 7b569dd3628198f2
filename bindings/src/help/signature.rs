//! Reading a help signature the way Rhai will call the function: which function it names and
//! how many parameters it takes (a method's receiver counts as the first, as Rhai counts it).
//!
//! The forms a signature takes:
//! - a call: `cat(tensors, dim) -> Tensor`, `t.matmul(b) -> Tensor`, `nn::linear(in, out)`;
//!   trailing parameters in `[, ...]` are optional (`nn::rms_norm(x, weight[, #{ eps }])`);
//! - an operator: `a + b -> Tensor`, `t * float`, `x += y`, `-t -> Tensor`;
//! - a property: `t.shape`, `tok.vocab_size -> int`;
//! - indexing: `t[i], t[a..b]`.

/// What a signature names and how many parameters it takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    pub kind: Kind,
    /// The name as a script writes it: `matmul`, `nn::linear`, `+`, `shape`; `[]` for indexing.
    pub name: String,
    /// The word before the `.` of a method or property (`t` in `t.matmul(b)`).
    pub receiver: Option<String>,
    /// Parameters without the optional ones, the receiver included.
    pub min_params: usize,
    /// Parameters with every optional one.
    pub max_params: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Call,
    Operator,
    Property,
    Index,
}

impl Signature {
    /// The name Rhai registers the function under: `get$shape` for a property, `index$get$`
    /// for indexing, the name itself otherwise.
    pub fn rhai_name(&self) -> String {
        match self.kind {
            Kind::Property => format!("get${}", self.name),
            Kind::Index => "index$get$".to_string(),
            Kind::Call | Kind::Operator => self.name.clone(),
        }
    }

    pub fn takes(&self, params: usize) -> bool {
        (self.min_params..=self.max_params).contains(&params)
    }
}

/// Parses a help signature; the error says what is malformed.
pub fn parse(signature: &str) -> Result<Signature, String> {
    let head = call_part(signature).trim();
    if head.is_empty() {
        return Err("empty signature".into());
    }
    if let Some(open) = head.find('(') {
        return parse_call(head, open);
    }
    if head.contains('[') {
        return Ok(Signature {
            kind: Kind::Index,
            name: "[]".into(),
            receiver: None,
            min_params: 2,
            max_params: 2,
        });
    }
    let words: Vec<&str> = head.split_whitespace().collect();
    match words.as_slice() {
        [lhs, op, rhs] if is_operator(op) && is_operand(lhs) && is_operand(rhs) => {
            Ok(operator(op, 2))
        }
        [one] if one.starts_with(['-', '!']) && is_operand(&one[1..]) => Ok(operator(&one[..1], 1)),
        [one] => match one.split_once('.') {
            Some((receiver, property)) if is_identifier(receiver) && is_identifier(property) => {
                Ok(Signature {
                    kind: Kind::Property,
                    name: property.into(),
                    receiver: Some(receiver.into()),
                    min_params: 1,
                    max_params: 1,
                })
            }
            _ => Err(format!(
                "`{head}` is neither a call, an operator nor a property"
            )),
        },
        _ => Err(format!(
            "`{head}` is neither a call, an operator nor a property"
        )),
    }
}

/// The signature up to its return type (` -> ...` outside any brackets).
fn call_part(signature: &str) -> &str {
    let mut depth = 0i32;
    for (i, c) in signature.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            '-' if depth == 0 && signature[i..].starts_with("->") => return &signature[..i],
            _ => {}
        }
    }
    signature
}

fn parse_call(head: &str, open: usize) -> Result<Signature, String> {
    let callee = head[..open].trim();
    let (receiver, name) = match callee.rsplit_once('.') {
        Some((r, n)) => (Some(r), n),
        None => (None, callee),
    };
    if receiver.is_some_and(|r| !is_identifier(r)) || !name.split("::").all(is_identifier) {
        return Err(format!("`{callee}` is not a function or method name"));
    }
    let close = matching_paren(head, open)
        .ok_or_else(|| format!("`{head}` has an unclosed parenthesis"))?;
    let rest = head[close + 1..].trim();
    if !rest.is_empty() {
        return Err(format!(
            "`{rest}` follows the parameter list; write one signature per entry"
        ));
    }
    let (required, optional) = count_parameters(&head[open + 1..close])?;
    let count = usize::from(receiver.is_some());
    Ok(Signature {
        kind: Kind::Call,
        name: name.into(),
        receiver: receiver.map(String::from),
        min_params: count + required,
        max_params: count + required + optional,
    })
}

fn matching_paren(text: &str, open: usize) -> Option<usize> {
    let mut depth = 0i32;
    let mut quote = None;
    for (i, c) in text.char_indices().skip_while(|(i, _)| *i < open) {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '`') => quote = Some(c),
            (None, '(' | '[' | '{') => depth += 1,
            (None, ')' | ']' | '}') => {
                depth -= 1;
                if depth == 0 {
                    return (c == ')').then_some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// Counts the parameters in a parameter list: `(required, optional)`. Commas inside brackets,
/// map literals, strings and a closure's `|a, b|` do not separate parameters; a `[, x, y]`
/// group holds optional ones.
fn count_parameters(list: &str) -> Result<(usize, usize), String> {
    let chars: Vec<char> = list.chars().collect();
    let (mut required, mut optional) = (0, 0);
    let mut current_is_empty = true;
    let mut depth = 0i32;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '`' => {
                i = skip_past(&chars, i + 1, c)?;
                current_is_empty = false;
                continue;
            }
            '|' if depth == 0 && current_is_empty => {
                // A closure's parameter list: `|a, b| ...`.
                i = skip_past(&chars, i + 1, '|')?;
                current_is_empty = false;
                continue;
            }
            '[' if depth == 0 && next_non_space(&chars, i + 1) == Some(',') => {
                let end = skip_group(&chars, i)?;
                optional += chars[i + 1..end - 1]
                    .iter()
                    .scan(0i32, |d, &c| {
                        match c {
                            '(' | '[' | '{' => *d += 1,
                            ')' | ']' | '}' => *d -= 1,
                            _ => {}
                        }
                        Some((*d, c))
                    })
                    .filter(|&(d, c)| d == 0 && c == ',')
                    .count();
                i = end;
                continue;
            }
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                if current_is_empty {
                    return Err("an empty parameter between commas".into());
                }
                required += 1;
                current_is_empty = true;
                i += 1;
                continue;
            }
            _ => {}
        }
        if !c.is_whitespace() {
            current_is_empty = false;
        }
        i += 1;
    }
    if depth != 0 {
        return Err("unbalanced brackets in the parameter list".into());
    }
    if !current_is_empty {
        required += 1;
    } else if required > 0 {
        return Err("a trailing comma in the parameter list".into());
    }
    Ok((required, optional))
}

/// The index after the next `close` at or after `from`.
fn skip_past(chars: &[char], from: usize, close: char) -> Result<usize, String> {
    chars[from..]
        .iter()
        .position(|&c| c == close)
        .map(|p| from + p + 1)
        .ok_or_else(|| format!("an unclosed `{close}`"))
}

/// The index after the bracket that closes the one at `open`.
fn skip_group(chars: &[char], open: usize) -> Result<usize, String> {
    let mut depth = 0i32;
    for (i, &c) in chars.iter().enumerate().skip(open) {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => {
                depth -= 1;
                if depth == 0 {
                    return Ok(i + 1);
                }
            }
            _ => {}
        }
    }
    Err("an unclosed `[`".into())
}

fn next_non_space(chars: &[char], from: usize) -> Option<char> {
    chars[from..].iter().copied().find(|c| !c.is_whitespace())
}

fn operator(op: &str, params: usize) -> Signature {
    Signature {
        kind: Kind::Operator,
        name: op.into(),
        receiver: None,
        min_params: params,
        max_params: params,
    }
}

fn is_operator(word: &str) -> bool {
    !word.is_empty() && word.chars().all(|c| "+-*/%<>=!&|^".contains(c))
}

fn is_operand(word: &str) -> bool {
    is_identifier(word) || word.parse::<f64>().is_ok()
}

fn is_identifier(word: &str) -> bool {
    let mut chars = word.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(signature: &str) -> (Kind, String, usize, usize) {
        let s = parse(signature).unwrap_or_else(|e| panic!("{signature}: {e}"));
        (s.kind, s.name, s.min_params, s.max_params)
    }

    #[test]
    fn a_method_counts_its_receiver_as_the_first_parameter() {
        assert_eq!(
            params("a.matmul(b) -> Tensor"),
            (Kind::Call, "matmul".into(), 2, 2)
        );
        assert_eq!(
            params("t.sum() -> Tensor"),
            (Kind::Call, "sum".into(), 1, 1)
        );
        assert_eq!(
            params("cat(tensors, dim) -> Tensor"),
            (Kind::Call, "cat".into(), 2, 2)
        );
        assert_eq!(
            params("cuda_available() -> bool"),
            (Kind::Call, "cuda_available".into(), 0, 0)
        );
    }

    #[test]
    fn maps_arrays_strings_and_closures_are_one_parameter_each() {
        let cases = [
            (
                "tensor(values, #{ dtype, device, requires_grad }) -> Tensor",
                2,
            ),
            ("model.train_step([x, y] | [[x, y], ...], opt) -> Tensor", 3),
            ("model.set_precision(\"auto\" | \"f32\" | \"bf16\")", 2),
            ("model.stream(ids, opts, |id| ...) -> ids", 4),
            ("no_grad(|| ...) -> value", 1),
            ("apply(|a, b| a + b, x)", 2),
            ("ds.split(fraction, seed) -> [train, test]", 3),
        ];
        for (signature, n) in cases {
            let s = parse(signature).unwrap();
            assert_eq!((s.min_params, s.max_params), (n, n), "{signature}");
        }
    }

    #[test]
    fn bracketed_trailing_parameters_are_optional() {
        let s = parse("nn::layer_norm(x, weight, bias[, #{ eps }]) -> Tensor").unwrap();
        assert_eq!(
            (s.name.as_str(), s.min_params, s.max_params),
            ("nn::layer_norm", 3, 4)
        );
        assert!(s.takes(3) && s.takes(4) && !s.takes(2));
    }

    #[test]
    fn operators_properties_and_indexing() {
        assert_eq!(
            params("a + b -> Tensor"),
            (Kind::Operator, "+".into(), 2, 2)
        );
        assert_eq!(params("x += float"), (Kind::Operator, "+=".into(), 2, 2));
        assert_eq!(params("-t -> Tensor"), (Kind::Operator, "-".into(), 1, 1));
        assert_eq!(params("t.shape"), (Kind::Property, "shape".into(), 1, 1));
        assert_eq!(
            params("tok.eos_id -> int or ()"),
            (Kind::Property, "eos_id".into(), 1, 1)
        );
        assert_eq!(
            params("t[i], t[a..b], t[a..=b]"),
            (Kind::Index, "[]".into(), 2, 2)
        );
        assert_eq!(parse("t.shape").unwrap().rhai_name(), "get$shape");
    }

    #[test]
    fn malformed_signatures_are_errors() {
        for bad in [
            "help() / help(name) -> string",
            "f(a, , b)",
            "f(a, b",
            "f(a,)",
            "just words here",
            "",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
    }
}

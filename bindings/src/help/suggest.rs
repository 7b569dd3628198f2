//! What to tell a script whose call matched no function: the forms the name has, or the
//! registered name closest to a misspelt one.

use super::book::{lookup, names};

/// The signatures `name` is documented with (each overload once), when it has any.
pub fn forms_of(name: &str) -> Vec<String> {
    let mut forms: Vec<String> = Vec::new();
    for entry in lookup(name) {
        if !forms.contains(&entry.signature) {
            forms.push(entry.signature);
        }
    }
    forms
}

/// The registered name nearest `name`, when it is near enough to be a typo.
pub fn closest_name(name: &str) -> Option<String> {
    let known = names();
    crate::suggest::did_you_mean(name, known.iter().map(String::as_str)).map(str::to_string)
}

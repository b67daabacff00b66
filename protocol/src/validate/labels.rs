//! Labels, label sets, selectors and path postfix templates.

#[allow(unused_imports)]
use super::*;

pub(crate) fn check_label(l: &Label, allow_prefix: bool) -> VResult {
    check_token(&l.name, TOKEN_SYMBOLS, MIN_LABEL_LEN, MAX_LABEL_LEN).map_err(|e| e.ctx("Name"))?;
    check_token(&l.value, PATH_SYMBOLS, 0, MAX_LABEL_VALUE_LEN).map_err(|e| e.ctx("Value"))?;
    if l.prefix && !allow_prefix {
        return fail("Prefix may not be set outside of a LabelSelector");
    }
    Ok(())
}

pub(crate) fn check_label_set(s: &LabelSet, allow_prefix: bool) -> VResult {
    let mut prev: Option<&Label> = None;
    for (i, l) in s.labels.iter().enumerate() {
        check_label(l, allow_prefix).map_err(|e| e.ctx(format!("Labels[{i}]")))?;
        let Some(p) = prev.replace(l) else {
            continue;
        };
        if p.name < l.name {
            continue;
        } else if p.name == l.name {
            if p.value >= l.value {
                return fail(format!(
                    "Labels not in unique, sorted order (index {i}; label {} value {} <= {})",
                    l.name, l.value, p.value
                ));
            } else if p.value.is_empty() {
                return fail(format!(
                    "Label has empty & non-empty values (index {i}; label {} value {})",
                    l.name, l.value
                ));
            }
        } else {
            return fail(format!(
                "Labels not in unique, sorted order (index {i}; label name {} <= {})",
                l.name, p.name
            ));
        }
    }
    Ok(())
}

impl Check for Label {
    fn check(&self) -> VResult {
        check_label(self, false)
    }
}

impl Check for LabelSet {
    fn check(&self) -> VResult {
        check_label_set(self, false)
    }
}

impl Check for LabelSelector {
    fn check(&self) -> VResult {
        check_label_set(&self.include.clone().unwrap_or_default(), true)
            .map_err(|e| e.ctx("Include"))?;
        check_label_set(&self.exclude.clone().unwrap_or_default(), true)
            .map_err(|e| e.ctx("Exclude"))?;
        Ok(())
    }
}

/// Validates a LabelSet which may hold prefix labels (as inside a LabelSelector).
pub fn validate_selector_label_set(s: &LabelSet) -> Result<(), ValidationError> {
    check_label_set(s, true).map_err(Into::into)
}

pub(crate) fn check_single_value_labels(s: &LabelSet) -> VResult {
    let mut prev: Option<&Label> = None;
    for (i, l) in s.labels.iter().enumerate() {
        if let Some(p) = prev.replace(l)
            && p.name == l.name
            && SINGLE_VALUE_LABELS.contains(&l.name.as_str())
        {
            return fail(format!(
                "expected single-value Label has multiple values (index {i}; label {} value {})",
                l.name, l.value
            ));
        }
    }
    Ok(())
}

/// Fails if a label which may carry only one value (see [`SINGLE_VALUE_LABELS`]) has
/// several.
pub fn validate_single_value_labels(s: &LabelSet) -> Result<(), ValidationError> {
    check_single_value_labels(s).map_err(Into::into)
}

pub(crate) fn first_value<'a>(s: &'a LabelSet, name: &str) -> Option<&'a str> {
    crate::label_lookup::values_of(s, name).next()
}

/// Go's `mime.ParseMediaType`, restricted to its verdict on the media type itself.
/// Returns the error text on failure.
pub(crate) fn check_media_type(v: &str) -> Result<(), &'static str> {
    fn is_token_char(c: char) -> bool {
        c > ' ' && c < '\u{7f}' && !"()<>@,;:\\\"/[]?=".contains(c)
    }
    fn consume_token(v: &str) -> (&str, &str) {
        match v.find(|c: char| !is_token_char(c)) {
            None => (v, ""),
            Some(i) => v.split_at(i),
        }
    }
    let base = v.split(';').next().unwrap_or_default();
    // Go lowercases rune by rune with the simple case mapping.
    let lowered: String = base
        .chars()
        .map(|c| c.to_lowercase().next().unwrap_or(c))
        .collect();
    let media = lowered.trim_matches(|c: char| c.is_whitespace());

    let (typ, rest) = consume_token(media);
    if typ.is_empty() {
        return Err("mime: no media type");
    }
    if rest.is_empty() {
        return Ok(());
    }
    let Some(rest) = rest.strip_prefix('/') else {
        return Err("mime: expected slash after first token");
    };
    let (sub, rest) = consume_token(rest);
    if sub.is_empty() {
        return Err("mime: expected token after slash");
    }
    if !rest.is_empty() {
        return Err("mime: unexpected content after media subtype");
    }
    Ok(())
}

pub(crate) fn check_journal_label_constraints(s: &LabelSet) -> VResult {
    use label_names::*;
    check_single_value_labels(s)?;
    let ct = first_value(s, CONTENT_TYPE);
    if let Some(ct) = ct
        && let Err(e) = check_media_type(ct)
    {
        return fail(format!("parsing {CONTENT_TYPE}: {e}"));
    }
    if first_value(s, MESSAGE_TYPE).is_some() {
        if ct.is_none() {
            return fail(format!(
                "expected {CONTENT_TYPE} label alongside {MESSAGE_TYPE}"
            ));
        }
    } else if first_value(s, MESSAGE_SUB_TYPE).is_some() {
        return fail(format!(
            "expected {MESSAGE_TYPE} label alongside {MESSAGE_SUB_TYPE}"
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Path postfix templates.

/// A conservative syntax check of a Go `text/template`, rejecting only what Go's parser
/// certainly rejects: unclosed actions, comments and quotes, empty actions, and
/// unbalanced `if`/`range`/`with`/`block`/`define` ... `end` blocks. Field references
/// and functions are not checked. Errors read as Go's
/// (`template: postfix:1: unclosed action`).
pub(crate) fn check_template(t: &str, name: &str) -> Result<(), String> {
    let err = |pos: usize, msg: &str| {
        let line = 1 + t.get(..pos).unwrap_or_default().matches('\n').count();
        format!("template: {name}:{line}: {msg}")
    };
    let mut depth = 0usize;
    let mut pos = 0;
    while let Some(off) = t.get(pos..).and_then(|s| s.find("{{")) {
        let start = pos + off;
        let mut i = start + 2;
        let rest = |i: usize| t.get(i..).unwrap_or_default();
        if rest(i).starts_with('-') && rest(i + 1).starts_with(|c: char| c.is_ascii_whitespace()) {
            i += 2;
        }
        // Comments: "{{/* ... */}}", allowing trim markers.
        if rest(i).starts_with("/*") {
            let Some(close) = rest(i + 2).find("*/") else {
                return Err(err(start, "unclosed comment"));
            };
            let after = i + 2 + close + 2;
            let tail = rest(after);
            let tail = tail
                .strip_prefix(|c: char| c.is_ascii_whitespace())
                .and_then(|t| t.strip_prefix('-'))
                .unwrap_or(tail);
            if !tail.starts_with("}}") {
                return Err(err(start, "comment ends before closing delimiter"));
            }
            pos = t.len() - tail.len() + 2;
            continue;
        }
        // Scan to the closing delimiter, skipping over quoted text.
        let body_start = i;
        let bytes = t.as_bytes();
        let end = loop {
            match bytes.get(i) {
                None => return Err(err(start, "unclosed action")),
                Some(b'}') if bytes.get(i + 1) == Some(&b'}') => break i,
                Some(&q @ (b'"' | b'\'')) => {
                    i += 1;
                    loop {
                        match bytes.get(i) {
                            None | Some(b'\n') => {
                                let what = if q == b'"' {
                                    "unterminated quoted string"
                                } else {
                                    "unterminated character constant"
                                };
                                return Err(err(start, what));
                            }
                            Some(b'\\') => i += 2,
                            Some(&c) if c == q => {
                                i += 1;
                                break;
                            }
                            Some(_) => i += 1,
                        }
                    }
                }
                Some(b'`') => match rest(i + 1).find('`') {
                    None => return Err(err(start, "unterminated raw quoted string")),
                    Some(n) => i += n + 2,
                },
                Some(_) => i += 1,
            }
        };
        let mut body = t.get(body_start..end).unwrap_or_default();
        if let Some(b) = body.strip_suffix('-')
            && b.ends_with(|c: char| c.is_ascii_whitespace())
        {
            body = b;
        }
        let body = body.trim();
        if body.is_empty() {
            return Err(err(start, "missing value for command"));
        }
        let word = body
            .split(|c: char| c.is_whitespace() || c == '(' || c == '|')
            .next()
            .unwrap_or_default();
        match word {
            "if" | "range" | "with" | "block" | "define" => depth += 1,
            "end" => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| err(start, "unexpected {{end}}"))?
            }
            "else" if depth == 0 => return Err(err(start, "unexpected {{else}}")),
            _ => {}
        }
        pos = end + 2;
    }
    if depth != 0 {
        return Err(err(t.len(), "unexpected EOF"));
    }
    Ok(())
}

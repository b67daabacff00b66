//! LabelSet and LabelSelector operations, with Gazette's semantics.
//!
//! A well-formed LabelSet is sorted by (name, value) without duplicates, and a name with
//! an empty value carries no other values. Every function that builds a set keeps that
//! order. Functions that read sets never panic on malformed (unsorted) input; they just
//! give the answer Gazette's merge-based algorithms would give for it.
//!
//! Selectors hold labels whose `prefix` flag asks for a string-prefix match of the value
//! rather than equality. In text form (`gazctl -l`) such a label is written with a
//! `:prefix` suffix on its name, e.g. `name:prefix=foo/`.

use crate::label_lookup::lower_bound;
pub use crate::label_lookup::{value_of, values_of};
use crate::validate::{Check, ValidationError, Verr, go_quote, label_names};
use crate::{Label, LabelSelector, LabelSet};
use regex::Regex;
use std::ops::Range;
use std::sync::OnceLock;

const PREFIX_SUFFIX: &str = ":prefix";

static EMPTY: LabelSet = LabelSet { labels: Vec::new() };

fn or_empty(s: &Option<LabelSet>) -> &LabelSet {
    s.as_ref().unwrap_or(&EMPTY)
}

/// A Label from a name which may carry the `:prefix` suffix marking a prefix match.
pub fn label(name: &str, value: &str) -> Label {
    let (name, prefix) = match name.strip_suffix(PREFIX_SUFFIX) {
        Some(n) => (n, true),
        None => (name, false),
    };
    Label {
        name: name.to_string(),
        value: value.to_string(),
        prefix,
    }
}

/// Builds a LabelSet from (name, value) pairs in any order, keeping it sorted and
/// dropping exact duplicates. Names may carry the `:prefix` suffix. The result is not
/// validated.
pub fn label_set(pairs: &[(&str, &str)]) -> LabelSet {
    let mut set = LabelSet::default();
    for (n, v) in pairs {
        add_value(&mut set, n, v);
    }
    set
}

/// Adds label `name` with `value`, keeping other values of `name`. A `:prefix` suffix
/// on `name` marks a prefix match (meaningful only within selectors). Adding a label
/// already present is a no-op.
pub fn add_value(set: &mut LabelSet, name: &str, value: &str) {
    let l = label(name, value);
    let at = set
        .labels
        .partition_point(|x| (x.name.as_str(), x.value.as_str()) < (l.name.as_str(), value));
    if set.labels.get(at) != Some(&l) {
        set.labels.insert(at, l);
    }
}

/// Sets label `name` to the single `value`, replacing all its existing values.
pub fn set_value(set: &mut LabelSet, name: &str, value: &str) {
    let l = label(name, value);
    let begin = lower_bound(set, &l.name);
    let end = begin
        + set
            .labels
            .get(begin..)
            .unwrap_or_default()
            .iter()
            .take_while(|x| x.name == l.name)
            .count();
    set.labels.splice(begin..end, [l]);
}

/// Removes every value of label `name`.
pub fn remove(set: &mut LabelSet, name: &str) {
    let begin = lower_bound(set, name);
    let end = begin
        + set
            .labels
            .get(begin..)
            .unwrap_or_default()
            .iter()
            .take_while(|x| x.name == name)
            .count();
    set.labels.drain(begin..end);
}

/// A full outer join of two sorted label slices on label name. Each step yields the
/// ranges of the left and right slices holding the next name (one of them may be empty).
struct Join<'a> {
    l: &'a [Label],
    r: &'a [Label],
    li: usize,
    ri: usize,
}

impl<'a> Join<'a> {
    fn new(l: &'a [Label], r: &'a [Label]) -> Self {
        Join { l, r, li: 0, ri: 0 }
    }
}

fn run_end(s: &[Label], begin: usize) -> usize {
    let Some(first) = s.get(begin) else {
        return begin;
    };
    begin
        + s.get(begin..)
            .unwrap_or_default()
            .iter()
            .take_while(|x| x.name == first.name)
            .count()
}

impl Iterator for Join<'_> {
    type Item = (Range<usize>, Range<usize>);

    fn next(&mut self) -> Option<Self::Item> {
        let (l, r) = (self.l.get(self.li), self.r.get(self.ri));
        let (step_l, step_r) = match (l, r) {
            (None, None) => return None,
            (Some(_), None) => (true, false),
            (None, Some(_)) => (false, true),
            (Some(a), Some(b)) => match a.name.cmp(&b.name) {
                std::cmp::Ordering::Less => (true, false),
                std::cmp::Ordering::Greater => (false, true),
                std::cmp::Ordering::Equal => (true, true),
            },
        };
        let lend = if step_l {
            run_end(self.l, self.li)
        } else {
            self.li
        };
        let rend = if step_r {
            run_end(self.r, self.ri)
        } else {
            self.ri
        };
        let out = (self.li..lend, self.ri..rend);
        self.li = lend;
        self.ri = rend;
        Some(out)
    }
}

fn slice(s: &[Label], r: Range<usize>) -> &[Label] {
    s.get(r).unwrap_or_default()
}

/// All labels of `a` and `b`. Where both sets have a label name, **`a`'s values are
/// kept** and `b`'s values of that name are dropped (Gazette's `UnionLabelSets(a, b)`).
pub fn union(a: &LabelSet, b: &LabelSet) -> LabelSet {
    let mut out = Vec::with_capacity(a.labels.len() + b.labels.len());
    for (lr, rr) in Join::new(&a.labels, &b.labels) {
        if !lr.is_empty() {
            out.extend_from_slice(slice(&a.labels, lr));
        } else {
            out.extend_from_slice(slice(&b.labels, rr));
        }
    }
    LabelSet { labels: out }
}

fn values_equal(a: &[Label], b: &[Label]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.value == y.value)
}

/// Labels of `a` whose name has exactly the same values in `b`.
pub fn intersect(a: &LabelSet, b: &LabelSet) -> LabelSet {
    let mut out = Vec::new();
    for (lr, rr) in Join::new(&a.labels, &b.labels) {
        let (x, y) = (slice(&a.labels, lr), slice(&b.labels, rr));
        if values_equal(x, y) {
            out.extend_from_slice(x);
        }
    }
    LabelSet { labels: out }
}

/// Labels of `a`, less those names whose values in `b` are exactly the same. A name
/// whose values differ at all between the sets is kept whole (Gazette's
/// `SubtractLabelSet(a, b)`).
pub fn subtract(a: &LabelSet, b: &LabelSet) -> LabelSet {
    let mut out = Vec::new();
    for (lr, rr) in Join::new(&a.labels, &b.labels) {
        let (x, y) = (slice(&a.labels, lr), slice(&b.labels, rr));
        if !values_equal(x, y) {
            out.extend_from_slice(x);
        }
    }
    LabelSet { labels: out }
}

/// Whether the selector labels `sel` match `set`: with `require_all`, every selector
/// name must be matched by one of its values; otherwise any matched name suffices.
fn match_labels(sel: &[Label], set: &[Label], require_all: bool) -> bool {
    for (lr, rr) in Join::new(sel, set) {
        if lr.is_empty() {
            continue; // A label of the set which the selector doesn't mention.
        }
        let (mut a, mut b) = (slice(sel, lr), slice(set, rr));
        let mut matched = false;
        while let (false, Some(x), Some(y)) = (matched, a.first(), b.first()) {
            // An empty selector value matches any value of the label.
            if x.value.is_empty()
                || (!x.prefix && x.value == y.value)
                || (x.prefix && y.value.starts_with(x.value.as_str()))
            {
                matched = true;
            } else if x.value < y.value {
                a = a.get(1..).unwrap_or_default();
            } else {
                b = b.get(1..).unwrap_or_default();
            }
        }
        if matched && !require_all {
            return true;
        } else if !matched && require_all {
            return false;
        }
    }
    require_all
}

/// Whether `set` is matched by `selector`: no excluded label is matched, and every
/// included label name is matched by at least one of its selector values (an empty
/// value matching any value, a prefix label matching values it prefixes).
pub fn matches(selector: &LabelSelector, set: &LabelSet) -> bool {
    let (include, exclude) = (or_empty(&selector.include), or_empty(&selector.exclude));
    if match_labels(&exclude.labels, &set.labels, false) {
        return false;
    }
    match_labels(&include.labels, &set.labels, true)
}

/// The labels a selector sees for a journal: `set` plus the meta-label
/// `name=<journal>` (Gazette's `JournalSpec.LabelSetExt`).
pub fn with_meta_name(set: &LabelSet, journal: &str) -> LabelSet {
    let meta = LabelSet {
        labels: vec![Label {
            name: label_names::NAME.to_string(),
            value: journal.to_string(),
            prefix: false,
        }],
    };
    union(&meta, set)
}

fn rewrite_prefix_set(set: &LabelSet) -> LabelSet {
    let prefixes: Vec<String> = values_of(set, label_names::PREFIX)
        .map(str::to_string)
        .collect();
    let mut out = set.clone();
    if prefixes.is_empty() {
        return out;
    }
    for p in &prefixes {
        add_value(&mut out, "name:prefix", p);
    }
    remove(&mut out, label_names::PREFIX);
    out
}

/// Rewrites the legacy meta-label `prefix=<p>` of the include and exclude sets into the
/// equivalent prefix match of the journal name, `name:prefix=<p>`.
pub fn rewrite_prefix_selector(sel: &LabelSelector) -> LabelSelector {
    let rewrite = |s: &Option<LabelSet>| s.as_ref().map(rewrite_prefix_set);
    LabelSelector {
        include: rewrite(&sel.include),
        exclude: rewrite(&sel.exclude),
    }
}

// ---------------------------------------------------------------------------------------
// Text form of selectors.

struct SelectorRes {
    equal: Regex,
    not_equal: Regex,
    set_in: Regex,
    set_not_in: Regex,
    exists: Regex,
    not_exists: Regex,
    set_value: Regex,
}

fn selector_res() -> &'static SelectorRes {
    static RES: OnceLock<SelectorRes> = OnceLock::new();
    RES.get_or_init(|| {
        const TOKEN: &str = r" ?([\pL\pN\-_+/.]{2,}(?::prefix)?)";
        const PATH: &str = r" ?([\pL\pN\-_+/.=%]*)";
        const COMMA_OR_END: &str = r" ?(?:,|$)";
        const PARENTHETICAL: &str = r" ?\(([^)]+)\)";
        let re = |p: String| Regex::new(&p).expect("static pattern compiles");
        SelectorRes {
            equal: re(format!("^{TOKEN} ?=?={PATH}{COMMA_OR_END}")),
            not_equal: re(format!("^{TOKEN} ?!={PATH}{COMMA_OR_END}")),
            set_in: re(format!("^{TOKEN} in{PARENTHETICAL}{COMMA_OR_END}")),
            set_not_in: re(format!("^{TOKEN} not ?in{PARENTHETICAL}{COMMA_OR_END}")),
            exists: re(format!("^{TOKEN}{COMMA_OR_END}")),
            not_exists: re(format!("^ ?!{TOKEN}{COMMA_OR_END}")),
            set_value: re(format!("^{PATH}{COMMA_OR_END}")),
        }
    })
}

fn group<'a>(c: &regex::Captures<'a>, i: usize) -> &'a str {
    c.get(i).map_or("", |m| m.as_str())
}

fn parse_set_parts(set: &mut LabelSet, name: &str, mut s: &str) -> Result<(), Verr> {
    let res = selector_res();
    while !s.is_empty() {
        let Some(c) = res.set_value.captures(s) else {
            return Err(Verr::new(format!(
                "could not match {} to a label selector set expression",
                go_quote(s)
            )));
        };
        let whole = group(&c, 0).len();
        if whole == 0 {
            return Err(Verr::new(format!(
                "could not match {} to a label selector set expression",
                go_quote(s)
            )));
        }
        add_value(set, name, group(&c, 1));
        s = s.get(whole..).unwrap_or_default();
    }
    Ok(())
}

fn parse_selector_inner(text: &str) -> Result<LabelSelector, Verr> {
    let res = selector_res();
    let (mut include, mut exclude) = (LabelSet::default(), LabelSet::default());
    let mut s = text;
    while !s.is_empty() {
        let consumed = if let Some(c) = res.equal.captures(s) {
            add_value(&mut include, group(&c, 1), group(&c, 2));
            group(&c, 0).len()
        } else if let Some(c) = res.not_equal.captures(s) {
            add_value(&mut exclude, group(&c, 1), group(&c, 2));
            group(&c, 0).len()
        } else if let Some(c) = res.set_in.captures(s) {
            parse_set_parts(&mut include, group(&c, 1), group(&c, 2))
                .map_err(|e| e.ctx(format!("parsing {}", go_quote(s))))?;
            group(&c, 0).len()
        } else if let Some(c) = res.set_not_in.captures(s) {
            parse_set_parts(&mut exclude, group(&c, 1), group(&c, 2))
                .map_err(|e| e.ctx(format!("parsing {}", go_quote(s))))?;
            group(&c, 0).len()
        } else if let Some(c) = res.exists.captures(s) {
            add_value(&mut include, group(&c, 1), "");
            group(&c, 0).len()
        } else if let Some(c) = res.not_exists.captures(s) {
            add_value(&mut exclude, group(&c, 1), "");
            group(&c, 0).len()
        } else {
            0
        };
        if consumed == 0 {
            return Err(Verr::new(format!(
                "could not match {} to a label selector expression",
                go_quote(s)
            )));
        }
        s = s.get(consumed..).unwrap_or_default();
    }
    let sel = LabelSelector {
        include: Some(include),
        exclude: Some(exclude),
    };
    sel.check()?;
    Ok(sel)
}

/// Parses a selector in `gazctl -l` syntax: comma-separated expressions of the forms
/// `k=v` (or `k==v`), `k!=v`, `k in (a,b)`, `k notin (a,b)` (or `not in`), `k` (the label
/// exists) and `!k` (it doesn't). A `:prefix` suffix on a name makes its values prefix
/// matches. Single spaces around operators are tolerated. The parsed selector must
/// validate; errors read as Gazette's. Both sets of the result are present.
pub fn parse_selector(text: &str) -> Result<LabelSelector, ValidationError> {
    parse_selector_inner(text).map_err(ValidationError::from)
}

/// The canonical text form of a selector, which [`parse_selector`] parses back into an
/// equal selector (Gazette's `LabelSelector.String`).
pub fn format_selector(sel: &LabelSelector) -> String {
    fn write(out: &mut String, input: &[Label], exclude: bool) {
        // Name prefix labels with their suffix so that they group apart from exact ones.
        let mut l: Vec<Label> = input
            .iter()
            .map(|x| {
                let mut x = x.clone();
                if x.prefix {
                    x.name.push_str(PREFIX_SUFFIX);
                }
                x
            })
            .collect();
        l.sort_by(|a, b| a.name.cmp(&b.name));
        let n = l.len();
        for (lr, _) in Join::new(&l, &l) {
            let end = lr.end;
            let run = slice(&l, lr);
            let Some(first) = run.first() else {
                continue;
            };
            if run.len() == 1 && first.value.is_empty() {
                if exclude {
                    out.push('!');
                }
                out.push_str(&first.name);
            } else if run.len() == 1 {
                out.push_str(&first.name);
                out.push_str(if exclude { "!=" } else { "=" });
                out.push_str(&first.value);
            } else {
                out.push_str(&first.name);
                out.push_str(if exclude { " notin (" } else { " in (" });
                let values: Vec<&str> = run.iter().map(|x| x.value.as_str()).collect();
                out.push_str(&values.join(","));
                out.push(')');
            }
            if end != n {
                out.push(',');
            }
        }
    }
    let (include, exclude) = (or_empty(&sel.include), or_empty(&sel.exclude));
    let mut out = String::new();
    write(&mut out, &include.labels, false);
    if !out.is_empty() && !exclude.labels.is_empty() {
        out.push(',');
    }
    write(&mut out, &exclude.labels, true);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::Validate;

    fn set(pairs: &[(&str, &str)]) -> LabelSet {
        let s = label_set(pairs);
        crate::validate::validate_selector_label_set(&s).expect("fixture set is valid");
        s
    }

    fn selector(include: &[(&str, &str)], exclude: &[(&str, &str)]) -> LabelSelector {
        LabelSelector {
            include: Some(set(include)),
            exclude: Some(set(exclude)),
        }
    }

    fn lbl(name: &str, value: &str) -> Label {
        Label {
            name: name.into(),
            value: value.into(),
            prefix: false,
        }
    }

    #[test]
    fn label_validation_cases() {
        let long_name = "a".repeat(65);
        let long_value = "a".repeat(1025);
        let cases: &[(&str, &str, &str)] = &[
            ("a-label", "a-value", ""),
            ("a/label", "a%20value", ""),
            ("a|label", "a-value", "Name: not a valid token (a|label)"),
            ("a-label", "a|value", "Value: not a valid token (a|value)"),
            (
                "a",
                "a-value",
                "Name: invalid length (1; expected 2 <= length <= 64)",
            ),
            (
                &long_name,
                "a-value",
                "Name: invalid length (65; expected 2 <= length <= 64)",
            ),
            ("a-label", "", ""),
            (
                "a-label",
                &long_value,
                "Value: invalid length (1025; expected 0 <= length <= 1024)",
            ),
            (
                "a-label:prefix",
                "a-value",
                "Name: not a valid token (a-label:prefix)",
            ),
            // Unicode letters and numbers are allowed; marks and separators are not.
            ("zoné", "värde٣", ""),
            ("ab", "a\u{301}", "Value: not a valid token (a\u{301})"),
            ("ab", "a b", "Value: not a valid token (a b)"),
            ("a#b", "v", "Name: not a valid token (a#b)"),
        ];
        for (name, value, expect) in cases {
            let got = lbl(name, value).validate();
            if expect.is_empty() {
                assert_eq!(got, Ok(()), "{name} {value}");
            } else {
                assert_eq!(
                    got,
                    Err(ValidationError(expect.to_string())),
                    "{name} {value}"
                );
            }
        }
        let mut prefixed = lbl("a-label", "v");
        prefixed.prefix = true;
        assert_eq!(
            prefixed.validate().unwrap_err().0,
            "Prefix may not be set outside of a LabelSelector"
        );
    }

    #[test]
    fn single_value_labels() {
        use crate::validate::validate_single_value_labels as check;
        assert!(
            check(&set(&[
                ("aaa", "bar"),
                ("aaa", "baz"),
                ("content-type", "a/type")
            ]))
            .is_ok()
        );
        assert_eq!(
            check(&set(&[
                ("aaa", "bar"),
                ("content-type", "a/type"),
                ("content-type", "other/type")
            ]))
            .unwrap_err()
            .0,
            "expected single-value Label has multiple values (index 2; label content-type value other/type)"
        );
        assert_eq!(
            check(&set(&[
                ("app.gazette.dev/instance", "a"),
                ("app.gazette.dev/instance", "b"),
                ("other", "c")
            ]))
            .unwrap_err()
            .0,
            "expected single-value Label has multiple values (index 1; label app.gazette.dev/instance value b)"
        );
    }

    #[test]
    fn set_validation_cases() {
        let mut s = LabelSet {
            labels: vec![
                lbl("bad label", "111"),
                lbl("aaa", "444"),
                lbl("aaa", "333"),
                lbl("aaa", "222"),
                lbl("ccc", ""),
                lbl("ccc", ""),
                lbl("ccc", "555"),
                Label {
                    name: "ddd".into(),
                    value: "666".into(),
                    prefix: true,
                },
            ],
        };
        let err = |s: &LabelSet| s.validate().unwrap_err().0;

        assert_eq!(err(&s), "Labels[0].Name: not a valid token (bad label)");
        s.labels[0].name = "bbb".into();
        assert_eq!(
            err(&s),
            "Labels not in unique, sorted order (index 1; label name aaa <= bbb)"
        );
        s.labels.swap(0, 3);
        assert_eq!(
            err(&s),
            "Labels not in unique, sorted order (index 2; label aaa value 333 <= 444)"
        );
        s.labels.swap(1, 2);
        assert_eq!(
            err(&s),
            "Labels not in unique, sorted order (index 5; label ccc value  <= )"
        );
        s.labels[5].value = "444".into();
        assert_eq!(
            err(&s),
            "Label has empty & non-empty values (index 5; label ccc value 444)"
        );
        s.labels[4].value = "44".into();
        assert_eq!(
            err(&s),
            "Labels[7]: Prefix may not be set outside of a LabelSelector"
        );
        s.labels[7].prefix = false;
        assert_eq!(s.validate(), Ok(()));
    }

    #[test]
    fn values_of_cases() {
        let s = LabelSet {
            labels: vec![
                lbl("DDDD", "111"),
                lbl("aaa", "222"),
                lbl("aaa", "333"),
                lbl("aaa", "444"),
                lbl("ccc", ""),
                lbl("ff", "555"),
            ],
        };
        assert_eq!(s.validate(), Ok(()));
        let cases: &[(&str, &[&str])] = &[
            ("aa", &[]),
            ("aaa", &["222", "333", "444"]),
            ("bbb", &[]),
            ("ccc", &[""]),
            ("ddd", &[]),
            ("DDDD", &["111"]),
            ("eee", &[]),
            ("ff", &["555"]),
        ];
        for (name, expect) in cases {
            let got: Vec<&str> = values_of(&s, name).collect();
            assert_eq!(&got, expect, "{name}");
            assert_eq!(value_of(&s, name), expect.first().copied());
        }
    }

    #[test]
    fn add_set_and_remove() {
        let mut s = LabelSet::default();
        add_value(&mut s, "bb", "3");
        add_value(&mut s, "aa", "0");
        add_value(&mut s, "bb", "1");
        add_value(&mut s, "aa", "2");
        add_value(&mut s, "bb", "3");
        add_value(&mut s, "bb", "4");
        assert_eq!(
            s,
            set(&[
                ("aa", "0"),
                ("aa", "2"),
                ("bb", "1"),
                ("bb", "3"),
                ("bb", "4")
            ])
        );

        set_value(&mut s, "bb:prefix", "5");
        set_value(&mut s, "cc", "6");
        set_value(&mut s, "00", "6");
        assert_eq!(
            s,
            set(&[
                ("00", "6"),
                ("aa", "0"),
                ("aa", "2"),
                ("bb:prefix", "5"),
                ("cc", "6")
            ])
        );

        set_value(&mut s, "00", "7");
        set_value(&mut s, "aa", "8");
        assert_eq!(
            s,
            set(&[("00", "7"), ("aa", "8"), ("bb:prefix", "5"), ("cc", "6")])
        );

        add_value(&mut s, "bb", "9");
        add_value(&mut s, "00", "00");
        remove(&mut s, "bb");
        remove(&mut s, "bb");
        assert_eq!(
            s,
            set(&[("00", "00"), ("00", "7"), ("aa", "8"), ("cc", "6")])
        );

        remove(&mut s, "0");
        remove(&mut s, "00");
        assert_eq!(s, set(&[("aa", "8"), ("cc", "6")]));
        remove(&mut s, "dd");
        remove(&mut s, "cc");
        assert_eq!(s, set(&[("aa", "8")]));
        remove(&mut s, "aa");
        assert_eq!(s, LabelSet::default());
    }

    #[test]
    fn union_prefers_lhs() {
        let got = union(
            &set(&[("bbb", "val-1"), ("bbb", "val-2"), ("ccc", "val-3")]),
            &set(&[
                ("aaa", "val-4"),
                ("aaa", "val-5"),
                ("bbb", "val-6"),
                ("ddd", "val-7"),
            ]),
        );
        assert_eq!(
            got,
            set(&[
                ("aaa", "val-4"),
                ("aaa", "val-5"),
                ("bbb", "val-1"),
                ("bbb", "val-2"),
                ("ccc", "val-3"),
                ("ddd", "val-7"),
            ])
        );
    }

    fn lhs_rhs() -> (LabelSet, LabelSet) {
        (
            set(&[
                ("aaa", "val"),
                ("bbb", "val-1"),
                ("ccc", "val-1"),
                ("ccc", "val-2"),
                ("ddd", "val-1"),
                ("ddd", "val-2"),
                ("eee", "val"),
                ("ggg", "val"),
            ]),
            set(&[
                ("aaa", "val"),
                ("bbb", "val-2"),
                ("ccc", "val-1"),
                ("ddd", "val-1"),
                ("ddd", "val-2"),
                ("fff", "val"),
                ("ggg", "val"),
            ]),
        )
    }

    #[test]
    fn intersection() {
        let (l, r) = lhs_rhs();
        assert_eq!(
            intersect(&l, &r),
            set(&[
                ("aaa", "val"),
                ("ddd", "val-1"),
                ("ddd", "val-2"),
                ("ggg", "val")
            ])
        );
    }

    #[test]
    fn subtraction() {
        let (l, r) = lhs_rhs();
        assert_eq!(
            subtract(&l, &r),
            set(&[
                ("bbb", "val-1"),
                ("ccc", "val-1"),
                ("ccc", "val-2"),
                ("eee", "val")
            ])
        );
    }

    #[test]
    fn register_update_sequence() {
        // Spec scenario 2: registers = union(union_registers, subtract(registers, subtract_registers)).
        let regs = union(&set(&[("AA", "11"), ("BB", "22")]), &LabelSet::default());
        assert_eq!(regs, set(&[("AA", "11"), ("BB", "22")]));
        let regs = union(
            &set(&[("CC", "33")]),
            &subtract(&regs, &set(&[("AA", "11"), ("BB", "XYZ")])),
        );
        assert_eq!(regs, set(&[("BB", "22"), ("CC", "33")]));
        let regs = union(
            &set(&[("AA", "44")]),
            &subtract(&regs, &set(&[("CC", "33")])),
        );
        assert_eq!(regs, set(&[("AA", "44"), ("BB", "22")]));

        assert!(matches(
            &parse_selector("AA in (11), BB").unwrap(),
            &set(&[("AA", "11"), ("BB", "22")])
        ));
        assert!(matches(
            &parse_selector("!AA, CC").unwrap(),
            &set(&[("BB", "22"), ("CC", "33")])
        ));
        assert!(!matches(&parse_selector("AA = 55").unwrap(), &regs));
    }

    #[test]
    fn join_cursors() {
        let l = set(&[
            ("aaa", "l0"),
            ("aaa", "l1"),
            ("ccc:prefix", "l2"),
            ("ccc:prefix", "l3"),
            ("ccc:prefix", "l4"),
            ("eee", "l5"),
            ("eee", "l6"),
        ]);
        let r = set(&[("bbb", "r0"), ("ccc", "r1"), ("ccc", "r2"), ("ddd", "r3")]);
        let got: Vec<_> = Join::new(&l.labels, &r.labels).collect();
        assert_eq!(
            got,
            vec![
                (0..2, 0..0),
                (2..2, 0..1),
                (2..5, 1..3),
                (5..5, 3..4),
                (5..7, 4..4),
            ]
        );
    }

    #[test]
    fn selector_validation_cases() {
        let mut sel = LabelSelector {
            include: Some(LabelSet {
                labels: vec![
                    lbl("include", "a-value"),
                    Label {
                        name: "prefix-thing".into(),
                        value: "prefix/".into(),
                        prefix: true,
                    },
                ],
            }),
            exclude: Some(LabelSet {
                labels: vec![lbl("exclude", "other-value")],
            }),
        };
        assert_eq!(sel.validate(), Ok(()));
        sel.include.as_mut().unwrap().labels[0].name = "bad label".into();
        assert_eq!(
            sel.validate().unwrap_err().0,
            "Include.Labels[0].Name: not a valid token (bad label)"
        );
        sel.include.as_mut().unwrap().labels[0].name = "include".into();
        sel.exclude.as_mut().unwrap().labels[0].name = "bad label".into();
        assert_eq!(
            sel.validate().unwrap_err().0,
            "Exclude.Labels[0].Name: not a valid token (bad label)"
        );
        // Absent sets are empty.
        assert_eq!(LabelSelector::default().validate(), Ok(()));
    }

    #[test]
    fn selector_matching_cases() {
        let mut sel = selector(
            &[
                ("inc-1:prefix", "a-val/"),
                ("inc-2", ""),
                ("inc-3", "val-1"),
                ("inc-3", "val-2"),
            ],
            &[("exc-1", ""), ("exc-2", "val-3"), ("exc-2", "val-4")],
        );
        let cases: &[(&[(&str, &str)], bool)] = &[
            (&[], false),
            (
                &[
                    ("foo", "bar"),
                    ("inc-1", "a-val/a/1"),
                    ("inc-2", "any"),
                    ("inc-3", "val-1"),
                ],
                true,
            ),
            (
                &[
                    ("foo", "bar"),
                    ("inc-1", "a-val/b/2"),
                    ("inc-2", "foo"),
                    ("inc-3", "val-1"),
                ],
                true,
            ),
            (
                &[
                    ("foo", "bar"),
                    ("inc-1", "a-val/c/3"),
                    ("inc-2", "any"),
                    ("inc-3", "val-2"),
                ],
                true,
            ),
            (
                &[
                    ("foo", "bar"),
                    ("inc-1", "bad-val/4"),
                    ("inc-2", "any"),
                    ("inc-3", "val-1"),
                ],
                false,
            ),
            (
                &[("foo", "bar"), ("inc-1", "a-val/5"), ("inc-3", "val-1")],
                false,
            ),
            (
                &[
                    ("foo", "bar"),
                    ("inc-1", "a-val/6"),
                    ("inc-2", "any"),
                    ("inc-3", "val-other"),
                ],
                false,
            ),
            (
                &[
                    ("exc-1", "any"),
                    ("foo", "bar"),
                    ("inc-1", "a-val/a/7"),
                    ("inc-2", "any"),
                    ("inc-3", "val-1"),
                ],
                false,
            ),
            (
                &[
                    ("exc-2", "val-4"),
                    ("foo", "bar"),
                    ("inc-1", "a-val/8"),
                    ("inc-2", "any"),
                    ("inc-3", "val-1"),
                ],
                false,
            ),
            (
                &[
                    ("exc-2", "val-ok"),
                    ("foo", "bar"),
                    ("inc-1", "a-val/9/9"),
                    ("inc-2", "any"),
                    ("inc-3", "val-1"),
                ],
                true,
            ),
        ];
        for (s, expect) in cases {
            assert_eq!(matches(&sel, &set(s)), *expect, "{s:?}");
        }

        // An exclude-only selector.
        sel.include = None;
        assert!(matches(&sel, &set(&[])));
        assert!(matches(&sel, &set(&[("foo", "bar")])));
        assert!(matches(&sel, &set(&[("exc-2", "val-ok"), ("foo", "bar")])));
        assert!(!matches(&sel, &set(&[("exc-2", "val-3"), ("foo", "bar")])));
        assert!(!matches(&sel, &set(&[("exc-1", "any"), ("foo", "bar")])));

        // The empty selector matches everything.
        assert!(matches(&LabelSelector::default(), &set(&[])));
        assert!(matches(&LabelSelector::default(), &set(&[("a-b", "c")])));
    }

    #[test]
    fn matching_never_panics_on_unsorted_input() {
        let unsorted = LabelSet {
            labels: vec![
                lbl("zz", "1"),
                lbl("aa", "2"),
                lbl("zz", ""),
                lbl("mm", "3"),
            ],
        };
        let sel = LabelSelector {
            include: Some(unsorted.clone()),
            exclude: Some(unsorted.clone()),
        };
        let _ = matches(&sel, &unsorted);
        let _ = union(&unsorted, &unsorted);
        let _ = subtract(&unsorted, &unsorted);
        let _ = intersect(&unsorted, &unsorted);
        let _ = values_of(&unsorted, "zz").count();
        let _ = format_selector(&sel);
        let mut s = unsorted.clone();
        add_value(&mut s, "bb", "x");
        set_value(&mut s, "zz", "x");
        remove(&mut s, "aa");
    }

    #[test]
    fn meta_name_label() {
        assert_eq!(
            with_meta_name(&set(&[("hello", "world")]), "path/to/my/journal"),
            set(&[("name", "path/to/my/journal"), ("hello", "world")])
        );
        assert_eq!(
            with_meta_name(&set(&[("aaa", "1"), ("zzz", "2")]), "a/journal"),
            set(&[("aaa", "1"), ("name", "a/journal"), ("zzz", "2")])
        );
    }

    /// Spec scenario 31: List selectors over journals A, B, C.
    #[test]
    fn list_selector_scenario() {
        let a = with_meta_name(&set(&[("foo", "bar")]), "journal/1/A");
        let b = with_meta_name(&set(&[("bar", "baz")]), "journal/2/B");
        let c = with_meta_name(&LabelSet::default(), "journal/1/C");
        let pick = |sel: &LabelSelector| -> Vec<&str> {
            [("A", &a), ("C", &c), ("B", &b)]
                .into_iter()
                .filter(|(_, s)| matches(sel, s))
                .map(|(n, _)| n)
                .collect()
        };
        let parse = |t: &str| rewrite_prefix_selector(&parse_selector(t).unwrap());

        assert_eq!(pick(&parse("!foo")), ["C", "B"]);
        assert_eq!(pick(&parse("name=journal/2/B")), ["B"]);
        assert_eq!(pick(&parse("name:prefix=journal/1")), ["A", "C"]);
        assert_eq!(pick(&parse("prefix=journal/1/")), ["A", "C"]);
        assert_eq!(pick(&parse("prefix!=journal/1/")), ["B"]);
    }

    #[test]
    fn prefix_rewriting() {
        let sel = parse_selector("prefix=a/b/, prefix=c/, other=x, prefix!=d/").unwrap();
        let got = rewrite_prefix_selector(&sel);
        assert_eq!(
            got,
            selector(
                &[
                    ("name:prefix", "a/b/"),
                    ("name:prefix", "c/"),
                    ("other", "x")
                ],
                &[("name:prefix", "d/")],
            )
        );
        // Selectors without "prefix" are unchanged, including absent sets.
        let plain = LabelSelector {
            include: Some(set(&[("a-b", "c")])),
            exclude: None,
        };
        assert_eq!(rewrite_prefix_selector(&plain), plain);
    }

    #[test]
    fn selector_parsing_cases() {
        let cases: Vec<(&str, LabelSelector)> = vec![
            ("foo = bar", selector(&[("foo", "bar")], &[])),
            ("foo:prefix =bar", selector(&[("foo:prefix", "bar")], &[])),
            ("foo != bar", selector(&[], &[("foo", "bar")])),
            ("foo ", selector(&[("foo", "")], &[])),
            (" !foo", selector(&[], &[("foo", "")])),
            (
                " foo in (bing, baz,bar)",
                selector(&[("foo", "bar"), ("foo", "baz"), ("foo", "bing")], &[]),
            ),
            (
                " foo not in ( pear, apple )",
                selector(&[], &[("foo", "apple"), ("foo", "pear")]),
            ),
            (
                "foo==bar, baz !=bing ,apple:prefix in (fruit, banana)",
                selector(
                    &[
                        ("apple:prefix", "banana"),
                        ("apple:prefix", "fruit"),
                        ("foo", "bar"),
                    ],
                    &[("baz", "bing")],
                ),
            ),
            (
                "!foo,baz,bing:prefix not in (thing-one, thing-2),!bar,",
                selector(
                    &[("baz", "")],
                    &[
                        ("bar", ""),
                        ("bing:prefix", "thing-2"),
                        ("bing:prefix", "thing-one"),
                        ("foo", ""),
                    ],
                ),
            ),
            (
                "foo = ba=ar, baz=bi=ngo,exc!=who=ops",
                selector(
                    &[("foo", "ba=ar"), ("baz", "bi=ngo")],
                    &[("exc", "who=ops")],
                ),
            ),
            (
                "foo in (bi=ng,ba=ar), exc notin (who=ops,oth=er)",
                selector(
                    &[("foo", "bi=ng"), ("foo", "ba=ar")],
                    &[("exc", "who=ops"), ("exc", "oth=er")],
                ),
            ),
            ("", selector(&[], &[])),
            ("námé=välüé", selector(&[("námé", "välüé")], &[])),
        ];
        for (text, expect) in cases {
            let sel = parse_selector(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(sel, expect, "{text}");
            // Round-trip through the canonical text form.
            let again = parse_selector(&format_selector(&sel)).unwrap();
            assert_eq!(again, sel, "{text} => {}", format_selector(&sel));
        }
    }

    #[test]
    fn selector_formatting() {
        let sel = parse_selector("foo==bar, baz !=bing ,apple:prefix in (fruit, banana),!xx, yy")
            .unwrap();
        assert_eq!(
            format_selector(&sel),
            "apple:prefix in (banana,fruit),foo=bar,yy,baz!=bing,!xx"
        );
        assert_eq!(format_selector(&LabelSelector::default()), "");
        assert_eq!(format_selector(&parse_selector("!a-b").unwrap()), "!a-b");
    }

    #[test]
    fn selector_parsing_errors() {
        let err = |t: &str| parse_selector(t).unwrap_err().0;
        assert_eq!(
            err("apple,banana err in (bar)"),
            r#"could not match "banana err in (bar)" to a label selector expression"#
        );
        assert_eq!(
            err("apple,banana in (bar,err baz)"),
            r#"parsing "banana in (bar,err baz)": could not match "err baz" to a label selector set expression"#
        );
        assert_eq!(
            err("ban=ana in (bar)"),
            r#"could not match "ban=ana in (bar)" to a label selector expression"#
        );
        assert_eq!(
            err("foo, foo in (bar)"),
            "Include: Label has empty & non-empty values (index 1; label foo value bar)"
        );
        assert_eq!(
            err("a=b\n"),
            r#"could not match "a=b\n" to a label selector expression"#
        );
        assert_eq!(
            err("x=1"),
            r#"could not match "x=1" to a label selector expression"#
        );
        let long = format!("{}=v", "n".repeat(65));
        assert_eq!(
            err(&long),
            "Include.Labels[0].Name: invalid length (65; expected 2 <= length <= 64)"
        );
    }

    #[test]
    fn selector_parsing_never_panics() {
        for text in [
            ",",
            " ",
            "(",
            ")",
            "a in (",
            "a in ()",
            "a notin (,)",
            "!",
            "!!a",
            "a:prefix",
            "a:prefix:prefix=b",
            "é",
            "a=é\u{301}",
            "aa in (b,,c)",
            "aa=\u{0}",
        ] {
            let _ = parse_selector(text);
        }
    }
}

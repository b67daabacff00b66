//! The optional INI config file, with Gazette's precedence: file < env vars < flags.
//!
//! Lives on: the main thread, before anything else starts. The first file found among
//! `./courant.ini`, `./gazette.ini`, `~/.config/courant/courant.ini` and
//! `~/.config/gazette/gazette.ini` is read; each `key = value` in a `[section]` names the
//! flag `--section.key` (sections and keys as `courant print-config` prints them, matched
//! case-insensitively; `[courant]` holds the flags without a group). A value becomes the
//! flag's environment variable unless that variable is already set, so clap then applies
//! env vars and flags over it. An empty value leaves a flag without a default unset (as
//! `courant print-config` prints such flags), so that printed configs read back. A key that
//! names no flag is an error in `courant.ini`, and a warning in `gazette.ini` (which may
//! hold Gazette options Courant does not have).

use std::io::Write as _;
use std::path::PathBuf;

/// Longest config file read, in bytes.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// Candidate files, in order.
fn candidates() -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from("courant.ini"), PathBuf::from("gazette.ini")];
    if let Some(home) = std::env::var_os("HOME") {
        let home = PathBuf::from(home);
        out.push(home.join(".config/courant/courant.ini"));
        out.push(home.join(".config/gazette/gazette.ini"));
    }
    out
}

/// One `key = value` of a config file.
#[derive(Debug, PartialEq)]
pub struct Entry {
    /// Lower-cased section, empty before the first header.
    pub section: String,
    pub key: String,
    pub value: String,
    /// 1-based line number.
    pub line: usize,
}

/// A config file that was read, and the flags it set.
pub struct Applied {
    pub path: PathBuf,
    /// (flag's long name, line) of every value exported from the file.
    pub set: Vec<(String, usize)>,
}

impl Applied {
    /// A note naming the file (and the line) behind a clap error, when the file set a value
    /// that the command line did not override.
    pub fn blame(&self, err: &clap::Error, args: &[String]) -> String {
        let invalid = match err.get(clap::error::ContextKind::InvalidArg) {
            Some(clap::error::ContextValue::String(arg)) => arg.clone(),
            _ => String::new(),
        };
        let long = invalid
            .trim_start_matches("--")
            .split([' ', '='])
            .next()
            .unwrap_or_default()
            .to_string();
        let flag = format!("--{long}");
        let on_command_line = args
            .iter()
            .any(|a| a == &flag || a.starts_with(&format!("{flag}=")));
        match self.set.iter().find(|(l, _)| l == &long) {
            Some((_, line)) if !long.is_empty() && !on_command_line => format!(
                "config file {} line {line} sets --{long}",
                self.path.display()
            ),
            _ => format!(
                "(settings were also read from config file {})",
                self.path.display()
            ),
        }
    }
}

/// Parses INI text into entries. Comments start with `;` or `#`.
pub fn parse(text: &str) -> Result<Vec<Entry>, String> {
    let mut section = String::new();
    let mut out = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with(';') || line.starts_with('#') {
            continue;
        }
        if let Some(rest) = line.strip_prefix('[') {
            let Some(name) = rest.strip_suffix(']') else {
                return Err(format!("line {}: unterminated section header", n + 1));
            };
            section = name.trim().to_ascii_lowercase();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err(format!("line {}: expected `key = value`", n + 1));
        };
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value);
        out.push(Entry {
            section: section.clone(),
            key: key.trim().to_ascii_lowercase(),
            value: value.to_string(),
            line: n + 1,
        });
    }
    Ok(out)
}

/// Reads the first config file found and exports its values as env vars of `cmd`'s flags.
/// Returns the file used, if any, and what it set.
pub fn apply(cmd: &clap::Command) -> Result<Option<Applied>, String> {
    let Some(path) = candidates().into_iter().find(|p| p.is_file()) else {
        return Ok(None);
    };
    // Named in full in every message: the operator may not know which file was picked up.
    let path = std::fs::canonicalize(&path).unwrap_or(path);
    let len = std::fs::metadata(&path).map_or(0, |m| m.len());
    if len > MAX_FILE_BYTES {
        return Err(format!(
            "{}: larger than {MAX_FILE_BYTES} bytes",
            path.display()
        ));
    }
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let entries = parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let strict = path
        .file_name()
        .is_some_and(|n| n.eq_ignore_ascii_case("courant.ini"));
    let mut set = Vec::new();
    for Entry {
        section,
        key,
        value,
        line,
    } in entries
    {
        let long = if section.is_empty() || section == "courant" || key.contains('.') {
            key.clone()
        } else {
            format!("{section}.{key}")
        };
        let Some(arg) = cmd
            .get_arguments()
            .find(|a| a.get_long().is_some_and(|l| l.eq_ignore_ascii_case(&long)))
        else {
            let what = format!(
                "{} line {line}: unknown option [{section}] {key} (no flag --{long})",
                path.display()
            );
            if strict {
                return Err(what);
            }
            // gazette.ini may configure Gazette options Courant does not have.
            // (Not eprintln!, which panics when stderr fails.)
            let _ = writeln!(std::io::stderr(), "courant: warning: {what}: ignored");
            continue;
        };
        let Some(env) = arg.get_env() else { continue };
        // An empty value of a flag without a default means "unset", as print-config
        // prints it (clap would refuse an empty path or number).
        if value.is_empty() && arg.get_default_values().is_empty() {
            continue;
        }
        if std::env::var_os(env).is_none() {
            // SAFETY: called from `main` before any other thread exists.
            unsafe { std::env::set_var(env, &value) };
            if let Some(long) = arg.get_long() {
                set.push((long.to_string(), line));
            }
        }
    }
    Ok(Some(Applied { path, set }))
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_sections_comments_and_quotes() {
        let got = super::parse(
            "; comment\n[Broker]\nport = 8080\n# another\nzone=\"z 1\"\n\n[log]\nlevel= info\n",
        )
        .unwrap();
        let got: Vec<_> = got
            .into_iter()
            .map(|e| (e.section, e.key, e.value, e.line))
            .collect();
        let want = [
            ("broker", "port", "8080", 3),
            ("broker", "zone", "z 1", 5),
            ("log", "level", "info", 8),
        ]
        .map(|(s, k, v, l)| (s.to_string(), k.to_string(), v.to_string(), l));
        assert_eq!(got, want);
        assert!(super::parse("[broken\n").is_err());
        assert!(super::parse("[a]\nno equals sign\n").is_err());
    }
}

//! The optional INI config file, with Gazette's precedence: file < env vars < flags.
//!
//! Lives on: the main thread, before anything else starts. The first file found among
//! `./courant.ini`, `./gazette.ini`, `~/.config/courant/courant.ini` and
//! `~/.config/gazette/gazette.ini` is read; each `key = value` in a `[section]` names the
//! flag `--section.key` (sections and keys as `courant print-config` prints them, matched
//! case-insensitively; `[courant]` holds the flags without a group). A value becomes the
//! flag's environment variable unless that variable is already set, so clap then applies
//! env vars and flags over it.

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

/// Parses INI text into (section, key, value) triples. Comments start with `;` or `#`.
pub fn parse(text: &str) -> Result<Vec<(String, String, String)>, String> {
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
        out.push((
            section.clone(),
            key.trim().to_ascii_lowercase(),
            value.to_string(),
        ));
    }
    Ok(out)
}

/// Reads the first config file found and exports its values as env vars of `cmd`'s flags.
/// Returns the file used, if any.
pub fn apply(cmd: &clap::Command) -> Result<Option<PathBuf>, String> {
    let Some(path) = candidates().into_iter().find(|p| p.is_file()) else {
        return Ok(None);
    };
    let len = std::fs::metadata(&path).map_or(0, |m| m.len());
    if len > MAX_FILE_BYTES {
        return Err(format!(
            "{}: larger than {MAX_FILE_BYTES} bytes",
            path.display()
        ));
    }
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let entries = parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    for (section, key, value) in entries {
        let long = if section.is_empty() || section == "courant" || key.contains('.') {
            key.clone()
        } else {
            format!("{section}.{key}")
        };
        // Unknown options are ignored, as Gazette's INI parsing does.
        let Some(arg) = cmd
            .get_arguments()
            .find(|a| a.get_long().is_some_and(|l| l.eq_ignore_ascii_case(&long)))
        else {
            continue;
        };
        let Some(env) = arg.get_env() else { continue };
        if std::env::var_os(env).is_none() {
            // SAFETY: called from `main` before any other thread exists.
            unsafe { std::env::set_var(env, &value) };
        }
    }
    Ok(Some(path))
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_sections_comments_and_quotes() {
        let got = super::parse(
            "; comment\n[Broker]\nport = 8080\n# another\nzone=\"z 1\"\n\n[log]\nlevel= info\n",
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                ("broker".into(), "port".into(), "8080".into()),
                ("broker".into(), "zone".into(), "z 1".into()),
                ("log".into(), "level".into(), "info".into()),
            ]
        );
        assert!(super::parse("[broken\n").is_err());
        assert!(super::parse("[a]\nno equals sign\n").is_err());
    }
}

//! Kafka's `ssl.principal.mapping.rules` (KIP-371): how an SSL client's certificate subject,
//! written as RFC 2253 writes a distinguished name, becomes the name of its principal
//! (`User:<name>`).
//!
//! The rules are a comma-separated list, tried in order; the first that applies names the
//! principal, and a subject no rule applies to is refused (the connection fails to
//! authenticate):
//! - `DEFAULT`: the distinguished name as it is;
//! - `RULE:pattern/replacement/` with an optional `L` or `U` after the last `/`: applies when
//!   the regular expression `pattern` matches the whole name, which `replacement` then rewrites
//!   (`$1`, `$2`, ... its groups, `${name}` a named one; a `$` that names no group of the
//!   pattern is refused when the rules are parsed, where Java, and so Kafka, fails every login
//!   the rule applies to), lowercased with `L` or uppercased with `U`. A `\` in either part
//!   escapes the next character (`\/`, `\,`, `\$`).
//!
//! The regular expressions are the `regex` crate's (RE2's syntax, without Java's backreferences
//! and lookaround); a rule using those is refused when the rules are parsed.

use regex::Regex;

/// One rule.
#[derive(Debug, Clone)]
enum Rule {
    /// The name as it is.
    Default,
    /// A pattern matching the whole name, its rewrite and case.
    Pattern { pattern: Regex, replacement: Vec<Piece>, case: Case },
}

/// A piece of a rule's replacement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    /// A group, by number (0: the whole match) or by name.
    Group(usize),
    Named(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Keep,
    Lower,
    Upper,
}

/// Parsed `ssl.principal.mapping.rules`.
#[derive(Debug, Clone)]
pub struct PrincipalMapper {
    rules: Vec<Rule>,
    text: String,
}

impl Default for PrincipalMapper {
    /// `DEFAULT`, Kafka's default: the distinguished name is the principal's name.
    fn default() -> Self {
        PrincipalMapper { rules: vec![Rule::Default], text: "DEFAULT".into() }
    }
}

/// Take `s` up to its first `/` that no `\` escapes; the text before it (escapes kept) and the
/// rest after it.
fn until_slash(s: &str) -> Option<(&str, &str)> {
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '/' => return Some((&s[..i], &s[i + 1..])),
            _ => {}
        }
    }
    None
}

impl PrincipalMapper {
    /// Parse Kafka's syntax; the error names the rule that is wrong and why.
    pub fn parse(rules: &str) -> Result<PrincipalMapper, String> {
        let mut parsed = Vec::new();
        let mut rest = rules.trim();
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix("DEFAULT") {
                parsed.push(Rule::Default);
                rest = after;
            } else if let Some(after) = rest.strip_prefix("RULE:") {
                let bad = |why: &str| format!("invalid rule at {rest:?}: {why}");
                let (pattern, after) = until_slash(after).ok_or_else(|| bad("no '/' after the pattern"))?;
                let (replacement, after) = until_slash(after).ok_or_else(|| bad("no '/' after the replacement"))?;
                let (case, after) = match after.chars().next() {
                    Some('L') => (Case::Lower, &after[1..]),
                    Some('U') => (Case::Upper, &after[1..]),
                    _ => (Case::Keep, after),
                };
                let pattern = Regex::new(&format!("^(?:{pattern})$"))
                    .map_err(|e| bad(&format!("the pattern is not a regular expression this broker reads: {e}")))?;
                let replacement = pieces(replacement, &pattern).map_err(|e| bad(&e))?;
                parsed.push(Rule::Pattern { pattern, replacement, case });
                rest = after;
            } else if !rest.starts_with(',') {
                return Err(format!("invalid rule at {rest:?}: expected DEFAULT or RULE:pattern/replacement/[LU]"));
            }
            rest = rest.trim_start();
            match rest.strip_prefix(',') {
                Some(after) => rest = after.trim_start(),
                None if rest.is_empty() => {}
                None => return Err(format!("invalid rule: unexpected {rest:?} where ',' or the end should be")),
            }
        }
        if parsed.is_empty() {
            return Err("no rule given (DEFAULT keeps the distinguished name)".into());
        }
        Ok(PrincipalMapper { rules: parsed, text: rules.trim().to_string() })
    }

    /// The principal name of the distinguished name `dn`; an error if no rule applies.
    pub fn name(&self, dn: &str) -> Result<String, String> {
        for rule in &self.rules {
            match rule {
                Rule::Default => return Ok(dn.to_string()),
                Rule::Pattern { pattern, replacement, case } => {
                    let Some(groups) = pattern.captures(dn) else { continue };
                    let name = replacement
                        .iter()
                        .map(|p| match p {
                            Piece::Text(t) => t.as_str(),
                            Piece::Group(n) => groups.get(*n).map_or("", |m| m.as_str()),
                            Piece::Named(n) => groups.name(n).map_or("", |m| m.as_str()),
                        })
                        .collect::<String>();
                    return Ok(match case {
                        Case::Keep => name,
                        Case::Lower => name.to_lowercase(),
                        Case::Upper => name.to_uppercase(),
                    });
                }
            }
        }
        Err(format!("no rule of {:?} applies to {dn:?}", self.text))
    }
}

/// Read `replacement` as Java's replacement syntax, as Kafka uses it, for `pattern`: `\x` is
/// `x`, `$N` the group N (as many digits as make a group the pattern has), `${name}` a named
/// group. A reference to no group of the pattern, a bare `$` and a trailing `\` are refused, as
/// Java refuses them (when the rule applies; here when it is read).
fn pieces(replacement: &str, pattern: &Regex) -> Result<Vec<Piece>, String> {
    let count = pattern.captures_len() - 1; // without group 0, the whole match
    let mut out = Vec::new();
    let mut text = String::new();
    let mut chars = replacement.chars().peekable();
    while let Some(c) = chars.next() {
        let piece = match c {
            '\\' => {
                text.push(chars.next().ok_or("the replacement ends in a '\\' that escapes nothing")?);
                continue;
            }
            '$' => match chars.next() {
                Some(d @ '0'..='9') => {
                    let mut n = d.to_digit(10).unwrap_or(0) as usize;
                    if n > count {
                        return Err(format!("${n} in the replacement: the pattern has {count} group(s)"));
                    }
                    while let Some(more) = chars.peek().and_then(|c| c.to_digit(10)).map(|d| n * 10 + d as usize) {
                        if more > count {
                            break;
                        }
                        n = more;
                        chars.next();
                    }
                    Piece::Group(n)
                }
                Some('{') => {
                    let name: String = chars.by_ref().take_while(|c| *c != '}').collect();
                    if !pattern.capture_names().flatten().any(|n| n == name) {
                        return Err(format!("${{{name}}} in the replacement: the pattern has no group of that name"));
                    }
                    Piece::Named(name)
                }
                _ => return Err("a '$' in the replacement names no group (write \\$ for a dollar sign)".into()),
            },
            c => {
                text.push(c);
                continue;
            }
        };
        if !text.is_empty() {
            out.push(Piece::Text(std::mem::take(&mut text)));
        }
        out.push(piece);
    }
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DN: &str = "CN=alice,OU=clients,O=epochfence";

    #[test]
    fn default_keeps_the_distinguished_name() {
        assert_eq!(PrincipalMapper::default().name(DN).unwrap(), DN);
        assert_eq!(PrincipalMapper::parse("DEFAULT").unwrap().name(DN).unwrap(), DN);
    }

    #[test]
    fn the_first_rule_that_matches_the_whole_name_rewrites_it() {
        let m = PrincipalMapper::parse(
            r"RULE:^CN=(.*?),OU=admins,.*$/$1-admin/, RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$3/U, DEFAULT",
        )
        .unwrap();
        assert_eq!(m.name(DN).unwrap(), "ALICE@EPOCHFENCE");
        assert_eq!(m.name("CN=bob,OU=admins,O=x").unwrap(), "bob-admin");
        assert_eq!(m.name("CN=carol").unwrap(), "CN=carol", "no pattern matches: DEFAULT");
        // A partial match is no match.
        let m = PrincipalMapper::parse("RULE:CN=alice/x/").unwrap();
        assert!(m.name(DN).unwrap_err().contains("no rule"), "a rule must match the whole name");
    }

    #[test]
    fn lowercase_escapes_and_group_references() {
        let m = PrincipalMapper::parse(r"RULE:^CN=([^,]*),.*$/User\/$1\$2/L").unwrap();
        assert_eq!(m.name("CN=Alice,O=x").unwrap(), "user/alice$2", "an escaped $ is text");
        let m = PrincipalMapper::parse(r"RULE:^CN=(?P<who>[^,]*)\,.*$/${who}/").unwrap();
        assert_eq!(m.name("CN=dave,O=x").unwrap(), "dave");
        // $12 with one group: group 1, then a literal 2.
        let m = PrincipalMapper::parse(r"RULE:^CN=(.*)$/$12/").unwrap();
        assert_eq!(m.name("CN=e").unwrap(), "e2");
        // References to no group fail every login in Kafka: refused when read here.
        for bad in [r"RULE:^CN=(.*)$/$2/", r"RULE:^CN=(.*)$/${who}/", r"RULE:^CN=(.*)$/a$/", r"RULE:^CN=(.*)$/$x/"] {
            let err = PrincipalMapper::parse(bad).unwrap_err();
            assert!(err.contains("replacement"), "{bad}: {err}");
        }
    }

    #[test]
    fn without_a_matching_rule_the_name_is_refused() {
        let m = PrincipalMapper::parse("RULE:^CN=(.*),OU=admins$/$1/").unwrap();
        let err = m.name(DN).unwrap_err();
        assert!(err.contains(DN), "{err}");
    }

    #[test]
    fn malformed_rules_are_refused_with_why() {
        for bad in ["", "RULE:abc", "RULE:a/b", "DEFAULTS", "RULE:(/x/", "nonsense", "DEFAULT x"] {
            assert!(PrincipalMapper::parse(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(PrincipalMapper::parse(" DEFAULT , ").is_ok());
    }
}

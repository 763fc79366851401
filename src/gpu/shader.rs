//! A tiny preprocessor for the `.wgsl` files in `shaders/`, in the spirit of web-rwkv's macros:
//! `#if NAME` / `#else` / `#endif` lines (nestable) select code, and `{{NAME}}` is replaced by a
//! define's value. A define is "true" when present and not `0`/`false`. `#unroll VAR COUNT` …
//! `#end` (nestable) repeats the lines between COUNT times (a number or a define), with `{VAR}`
//! replaced by 0, 1, …: CPU WebGPU implementations such as SwiftShader neither unroll loops nor
//! keep a local array indexed by a loop counter in registers, so a register-blocked kernel spells
//! its accumulators out (measured: 6-10x faster there). `enable` directives
//! are hoisted to the top, so a kernel file may declare them even when a shared prelude is
//! concatenated in front of it. Shaders stay real WGSL
//! files a reader can open; the defines only pick a variant (tile size, epilogue, layout).

use std::collections::BTreeMap;

use crate::error::{Error, Result};

/// Sorted, so that the same set of defines always gives the same pipeline cache key.
pub type Defines = BTreeMap<String, String>;

pub fn is_true(defines: &Defines, name: &str) -> bool {
    defines.get(name).is_some_and(|v| v != "0" && v != "false")
}

pub fn preprocess(name: &str, source: &str, defines: &Defines) -> Result<String> {
    let lines: Vec<(usize, String)> = source.lines().enumerate().map(|(i, l)| (i, l.to_string())).collect();
    let lines = unroll(name, &lines, defines)?;
    let mut out = String::with_capacity(source.len());
    let mut directives = String::new();
    // Each entry: (this branch active, any enclosing branch active)
    let mut stack: Vec<(bool, bool)> = Vec::new();
    let active = |stack: &Vec<(bool, bool)>| stack.last().is_none_or(|&(a, p)| a && p);
    for (lineno, line) in &lines {
        let (lineno, line) = (*lineno, line.as_str());
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("#if ") {
            let parent = active(&stack);
            stack.push((is_true(defines, rest.trim()), parent));
        } else if trimmed.starts_with("#else") {
            let top = stack.last_mut().ok_or_else(|| Error::Gpu(format!("{name}:{}: #else without #if", lineno + 1)))?;
            top.0 = !top.0;
        } else if trimmed.starts_with("#endif") {
            stack.pop().ok_or_else(|| Error::Gpu(format!("{name}:{}: #endif without #if", lineno + 1)))?;
        } else if active(&stack) && trimmed.starts_with("enable ") {
            if !directives.lines().any(|d| d == trimmed) {
                directives.push_str(trimmed);
                directives.push('\n');
            }
        } else if active(&stack) {
            out.push_str(&substitute(name, lineno, line, defines)?);
            out.push('\n');
        }
    }
    if !stack.is_empty() {
        return Err(Error::Gpu(format!("{name}: unterminated #if")));
    }
    Ok(directives + &out)
}

/// Expands `#unroll VAR COUNT` … `#end` blocks (innermost last), keeping each line's number
/// for error messages.
fn unroll(name: &str, lines: &[(usize, String)], defines: &Defines) -> Result<Vec<(usize, String)>> {
    let mut out = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        let (lineno, line) = &lines[i];
        let Some(rest) = line.trim_start().strip_prefix("#unroll ") else {
            if is_end(line) {
                return Err(Error::Gpu(format!("{name}:{}: #end without #unroll", lineno + 1)));
            }
            out.push((*lineno, line.clone()));
            i += 1;
            continue;
        };
        let bad = || Error::Gpu(format!("{name}:{}: expected `#unroll VAR COUNT`", lineno + 1));
        let mut words = rest.split_whitespace();
        let (var, count) = (words.next().ok_or_else(bad)?, words.next().ok_or_else(bad)?);
        let count: usize = defines.get(count).map_or(count, |v| v.as_str()).parse().map_err(|_| bad())?;
        // The matching #end.
        let mut depth = 1;
        let mut j = i + 1;
        while j < lines.len() {
            if lines[j].1.trim_start().starts_with("#unroll ") {
                depth += 1;
            } else if is_end(&lines[j].1) {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            j += 1;
        }
        if depth != 0 {
            return Err(Error::Gpu(format!("{name}:{}: unterminated #unroll", lineno + 1)));
        }
        let body = unroll(name, &lines[i + 1..j], defines)?;
        let token = format!("{{{var}}}");
        for n in 0..count {
            out.extend(body.iter().map(|(l, s)| (*l, s.replace(&token, &n.to_string()))));
        }
        i = j + 1;
    }
    Ok(out)
}

/// An `#unroll` block's closing `#end` (and not an `#endif`).
fn is_end(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("#end") && !t.starts_with("#endif")
}

fn substitute(name: &str, lineno: usize, line: &str, defines: &Defines) -> Result<String> {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find("{{") {
        let end = rest[start..].find("}}").ok_or_else(|| Error::Gpu(format!("{name}:{}: unclosed {{{{", lineno + 1)))?;
        let key = &rest[start + 2..start + end];
        let value = defines.get(key).ok_or_else(|| Error::Gpu(format!("{name}:{}: undefined {{{{{key}}}}}", lineno + 1)))?;
        out.push_str(&rest[..start]);
        out.push_str(value);
        rest = &rest[start + end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defs(pairs: &[(&str, &str)]) -> Defines {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn selects_branches_and_substitutes() {
        let src = "a\n#if X\nb {{N}}\n#if Y\nc\n#else\nd\n#endif\n#else\ne\n#endif\nf";
        let out = preprocess("t", src, &defs(&[("X", "1"), ("N", "8")])).unwrap();
        assert_eq!(out, "a\nb 8\nd\nf\n");
        let out = preprocess("t", src, &defs(&[("N", "8")])).unwrap();
        assert_eq!(out, "a\ne\nf\n");
    }

    #[test]
    fn unrolls_nested_blocks() {
        let src = "#unroll r R\n#unroll j 2\nacc{r}_{j} {{N}}\n#end\nrow{r}\n#end\nx";
        let out = preprocess("t", src, &defs(&[("R", "2"), ("N", "7")])).unwrap();
        assert_eq!(out, "acc0_0 7\nacc0_1 7\nrow0\nacc1_0 7\nacc1_1 7\nrow1\nx\n");
        assert!(preprocess("t", "#unroll r 2\nx\n", &defs(&[])).is_err());
        assert!(preprocess("t", "#end\n", &defs(&[])).is_err());
        assert!(preprocess("t", "#unroll r R\nx\n#end\n", &defs(&[])).is_err());
    }

    #[test]
    fn hoists_enable_directives() {
        let out = preprocess("t", "fn f() {}\nenable subgroups;\n", &defs(&[])).unwrap();
        assert_eq!(out, "enable subgroups;\nfn f() {}\n");
    }

    #[test]
    fn reports_errors() {
        assert!(preprocess("t", "#if X\n", &defs(&[])).is_err());
        assert!(preprocess("t", "#endif\n", &defs(&[])).is_err());
        assert!(preprocess("t", "x {{M}}\n", &defs(&[])).is_err());
    }
}

//! Brace ranges in source arguments, WebDataset's notation for a set of
//! shards: `train-{000000..000127}.tar` is those 128 names, in order, with
//! the zero padding of the range's bounds; `{a,b}` lists alternatives. A
//! shell expands them too when the argument is unquoted; this is for the
//! quoted forms that scripts and WebDataset URLs carry.

/// The names `arg` stands for: itself when it holds no brace range.
pub fn expand(arg: &str) -> Result<Vec<String>, String> {
    let Some(open) = arg.find('{') else {
        return Ok(vec![arg.to_string()]);
    };
    let Some(len) = arg[open..].find('}') else {
        return Ok(vec![arg.to_string()]);
    };
    let close = open + len;
    let (head, body, tail) = (&arg[..open], &arg[open + 1..close], &arg[close + 1..]);
    let items: Vec<String> = if let Some((a, b)) = body.split_once("..") {
        let (Ok(lo), Ok(hi)) = (a.parse::<u64>(), b.parse::<u64>()) else {
            return Err(format!("{arg}: {{{body}}} is not a range of numbers"));
        };
        if lo > hi {
            return Err(format!("{arg}: the range {{{body}}} runs backwards"));
        }
        if hi - lo >= 10_000_000 {
            return Err(format!(
                "{arg}: the range {{{body}}} names more than 10 million sources"
            ));
        }
        let width = if a.starts_with('0') || b.starts_with('0') {
            a.len().max(b.len())
        } else {
            0
        };
        (lo..=hi).map(|n| format!("{n:0width$}")).collect()
    } else if body.contains(',') {
        body.split(',').map(str::to_string).collect()
    } else {
        // `{}` or `{x}`: not a brace expression; keep it and go on after it.
        return Ok(expand(tail)?
            .into_iter()
            .map(|t| format!("{}{{{body}}}{t}", head))
            .collect());
    };
    let tails = expand(tail)?;
    let mut out = Vec::with_capacity(items.len() * tails.len());
    for i in &items {
        for t in &tails {
            out.push(format!("{head}{i}{t}"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::expand;

    #[test]
    fn ranges_keep_their_padding_and_order() {
        assert_eq!(
            expand("s/train-{000008..000011}.tar").unwrap(),
            [
                "s/train-000008.tar",
                "s/train-000009.tar",
                "s/train-000010.tar",
                "s/train-000011.tar"
            ]
        );
        assert_eq!(expand("a{9..10}").unwrap(), ["a9", "a10"]);
        assert_eq!(
            expand("{a,b}-{1..2}").unwrap(),
            ["a-1", "a-2", "b-1", "b-2"]
        );
        assert_eq!(expand("plain.tar").unwrap(), ["plain.tar"]);
        assert_eq!(expand("odd{x}.tar").unwrap(), ["odd{x}.tar"]);
        assert!(expand("x{5..1}").is_err());
        assert!(expand("x{a..b}").is_err());
    }
}

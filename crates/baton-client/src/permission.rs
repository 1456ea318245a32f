//! What a refusal by `baton serve` for want of a token or a scope says: which scope is needed,
//! on which key, which token asked, and how to get one that may.
//!
//! One formatter, used on both sides: the server writes its 401 and 403 bodies' `message` with
//! it (and sends its parts as fields: `scope`, `key`, `token`), and the client rebuilds the
//! sentence from those fields for the `baton: …` line, adding what only the client knows
//! (whether it sent a token at all). A store's own refusals (an IAM policy, a database role)
//! are [`baton_store::StoreError::Denied`] naming the action to allow, and never come here.

/// The token a refused request carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presented<'a> {
    /// None at all.
    Nothing,
    /// One the server does not know (mistyped, revoked, or another server's).
    Unknown,
    /// A known token, by its name (never the token itself).
    Named(&'a str),
    /// A CI's ID token that a trust policy accepted (`baton serve --trust`), by the identity
    /// it proves and the policies it matched.
    Identity(&'a str),
}

/// A request refused for want of a token or a scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Denial<'a> {
    /// The scope the request needs (`read`, `lock`, `admin`), when the server said.
    pub scope: Option<&'a str>,
    /// The key it needs it on; `None`: some key (a listing, `/metrics`).
    pub key: Option<&'a str>,
    /// The token it carried.
    pub token: Presented<'a>,
}

impl Denial<'_> {
    /// The refusal as one line that says what to do.
    pub fn sentence(&self) -> String {
        let on = match self.key {
            Some(key) => format!("on the key {key:?}"),
            None => "on any key".to_owned(),
        };
        let what = match (self.token, self.scope) {
            (Presented::Named(name), Some(scope)) => {
                format!("the token {name:?} has no `{scope}` scope {on}")
            }
            (Presented::Named(name), None) => format!("the token {name:?} may not do that"),
            (Presented::Identity(name), Some(scope)) => {
                format!("the CI identity {name:?} has no `{scope}` scope {on}")
            }
            (Presented::Identity(name), None) => {
                format!("the CI identity {name:?} may not do that")
            }
            (Presented::Unknown, _) => {
                "this server does not know the token sent (mistyped, revoked, or made for \
                 another server)"
                    .to_owned()
            }
            (Presented::Nothing, _) => "this server needs a token and none was sent".to_owned(),
        };
        format!("{what}; {}", self.remedy())
    }

    /// How to get a token that may: the command that makes one, with the scope it needs (for
    /// a CI identity: the trust policy that grants it).
    fn remedy(&self) -> String {
        let scope = match (self.scope, self.key) {
            (Some(scope), Some(key)) => format!("{scope}:{key}"),
            (Some(scope), None) => format!("{scope}:"),
            (None, _) => "SCOPE:PREFIX".to_owned(),
        };
        if let Presented::Identity(_) = self.token {
            return format!(
                "whoever keeps the server's trust file (baton serve --trust) can add {} to the \
                 scopes of a [[trust]] policy this identity matches",
                shell_word(&scope)
            );
        }
        let which = if self.scope.is_none() {
            " (read to look, lock to take turns and run jobs, admin to cancel others' turns)"
        } else {
            ""
        };
        format!(
            "whoever keeps the server's tokens file can make one with `baton tokens new NAME \
             --scope {}`{which}; give it in BATON_TOKEN or --token",
            shell_word(&scope)
        )
    }
}

/// `text` as one shell word: as it is when it is plain, else in single quotes.
fn shell_word(text: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/_.:-@%+=,".contains(c);
    if text.chars().all(plain) {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_denial_names_the_scope_the_key_the_token_and_the_command() {
        let cases: &[(Denial, &str)] = &[
            (
                Denial {
                    scope: Some("admin"),
                    key: Some("deploy/prod"),
                    token: Presented::Named("ci"),
                },
                "the token \"ci\" has no `admin` scope on the key \"deploy/prod\"; whoever keeps \
                 the server's tokens file can make one with `baton tokens new NAME --scope \
                 admin:deploy/prod`; give it in BATON_TOKEN or --token",
            ),
            (
                Denial {
                    scope: Some("read"),
                    key: None,
                    token: Presented::Named("ci"),
                },
                "the token \"ci\" has no `read` scope on any key; whoever keeps the server's \
                 tokens file can make one with `baton tokens new NAME --scope read:`; give it \
                 in BATON_TOKEN or --token",
            ),
            (
                Denial {
                    scope: None,
                    key: None,
                    token: Presented::Named("ci"),
                },
                "the token \"ci\" may not do that; whoever keeps the server's tokens file can \
                 make one with `baton tokens new NAME --scope SCOPE:PREFIX` (read to look, lock \
                 to take turns and run jobs, admin to cancel others' turns); give it in \
                 BATON_TOKEN or --token",
            ),
            (
                Denial {
                    scope: None,
                    key: None,
                    token: Presented::Nothing,
                },
                "this server needs a token and none was sent; whoever keeps the server's tokens \
                 file can make one with `baton tokens new NAME --scope SCOPE:PREFIX` (read to \
                 look, lock to take turns and run jobs, admin to cancel others' turns); give it \
                 in BATON_TOKEN or --token",
            ),
            (
                Denial {
                    scope: Some("lock"),
                    key: Some("deploy/prod"),
                    token: Presented::Identity("acme/app@refs/heads/main run 42 (acme main)"),
                },
                "the CI identity \"acme/app@refs/heads/main run 42 (acme main)\" has no `lock` \
                 scope on the key \"deploy/prod\"; whoever keeps the server's trust file (baton \
                 serve --trust) can add lock:deploy/prod to the scopes of a [[trust]] policy \
                 this identity matches",
            ),
            (
                Denial {
                    scope: Some("lock"),
                    key: Some("a b"),
                    token: Presented::Unknown,
                },
                "this server does not know the token sent (mistyped, revoked, or made for \
                 another server); whoever keeps the server's tokens file can make one with \
                 `baton tokens new NAME --scope 'lock:a b'`; give it in BATON_TOKEN or --token",
            ),
        ];
        for (denial, said) in cases {
            assert_eq!(denial.sentence(), *said, "{denial:?}");
        }
    }
}

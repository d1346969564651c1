//! etcd's JWT tokens (server/auth/jwt.go, options.go): `--auth-token
//! jwt,pub-key=FILE,priv-key=FILE,sign-method=ALG,ttl=DURATION`. A token is a
//! JWT signed with the private key whose claims are `username`, `revision` (the
//! auth revision when it was issued) and `exp` (now + ttl, default 5 min). It is
//! not stored: any server with the public key accepts it until it expires; a
//! change of the auth store since its revision makes permission checks answer
//! `revision of auth store is old`.
//!
//! Without pub-key the public key is derived from priv-key, as etcd does;
//! without priv-key the server only verifies, as etcd.
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};

use super::AuthError;

/// The verifying key of a private key given alone (PEM, PKCS#8 or PKCS#1 for
/// RSA), in the form jsonwebtoken hands to ring: an RSAPublicKey DER, an
/// uncompressed EC point, or Ed25519's 32 bytes.
fn derived_public(alg: Algorithm, private_pem: &[u8]) -> Result<DecodingKey, String> {
    let bad = |e: &dyn std::fmt::Display| format!("--auth-token priv-key: {e}");
    let block = pem::parse(private_pem).map_err(|e| bad(&e))?;
    let der = block.contents();
    use ring::signature::{self, KeyPair};
    Ok(match alg {
        Algorithm::ES256 | Algorithm::ES384 => {
            let a = if alg == Algorithm::ES256 { &signature::ECDSA_P256_SHA256_FIXED_SIGNING } else { &signature::ECDSA_P384_SHA384_FIXED_SIGNING };
            let kp = signature::EcdsaKeyPair::from_pkcs8(a, der, &ring::rand::SystemRandom::new()).map_err(|e| bad(&e))?;
            DecodingKey::from_ec_der(kp.public_key().as_ref())
        }
        Algorithm::EdDSA => {
            let kp = signature::Ed25519KeyPair::from_pkcs8_maybe_unchecked(der).map_err(|e| bad(&e))?;
            DecodingKey::from_ed_der(kp.public_key().as_ref())
        }
        _ => {
            let kp = if block.tag() == "RSA PRIVATE KEY" { signature::RsaKeyPair::from_der(der) } else { signature::RsaKeyPair::from_pkcs8(der) };
            let kp = kp.map_err(|e| bad(&e))?;
            DecodingKey::from_rsa_der(kp.public().as_ref())
        }
    })
}

pub struct JwtTokens {
    alg: Algorithm,
    enc: Option<EncodingKey>,
    dec: DecodingKey,
    ttl: Duration,
}

fn algorithm(m: &str) -> Option<Algorithm> {
    Some(match m {
        "RS256" => Algorithm::RS256,
        "RS384" => Algorithm::RS384,
        "RS512" => Algorithm::RS512,
        "PS256" => Algorithm::PS256,
        "PS384" => Algorithm::PS384,
        "PS512" => Algorithm::PS512,
        "ES256" => Algorithm::ES256,
        "ES384" => Algorithm::ES384,
        "EdDSA" => Algorithm::EdDSA,
        "HS256" => Algorithm::HS256,
        "HS384" => Algorithm::HS384,
        "HS512" => Algorithm::HS512,
        _ => return None,
    })
}

impl std::fmt::Debug for JwtTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JwtTokens({:?}, ttl {:?}, signs: {})", self.alg, self.ttl, self.enc.is_some())
    }
}

impl JwtTokens {
    /// Parses etcd's option string (`jwt,k=v,...`; a malformed or repeated
    /// option is etcd's `auth: invalid auth options`) and loads the keys.
    pub fn parse(opts: &str) -> Result<JwtTokens, String> {
        let invalid = || format!("--auth-token {opts:?}: auth: invalid auth options");
        let mut parts = opts.split(',');
        if parts.next() != Some("jwt") {
            return Err(invalid());
        }
        let mut m = std::collections::HashMap::new();
        for p in parts {
            let kv: Vec<&str> = p.split('=').collect();
            if kv.len() != 2 || m.insert(kv[0], kv[1]).is_some() {
                return Err(invalid());
            }
        }
        let ttl = match m.get("ttl") {
            Some(t) if !t.is_empty() => crate::config::parse_duration(t).map_err(|e| format!("--auth-token ttl: {e}"))?,
            _ => Duration::from_secs(300),
        };
        let method = m.get("sign-method").copied().unwrap_or("");
        let alg = algorithm(method).ok_or_else(|| format!("--auth-token: auth: invalid auth signature method {method:?}"))?;
        let read = |k: &str| -> Result<Option<Vec<u8>>, String> {
            match m.get(k) {
                Some(f) if !f.is_empty() => std::fs::read(f).map(Some).map_err(|e| format!("--auth-token {k} {f}: {e}")),
                _ => Ok(None),
            }
        };
        let (public, private) = (read("pub-key")?, read("priv-key")?);
        let bad = |e: jsonwebtoken::errors::Error| format!("--auth-token: {e}");
        let (enc, dec) = match alg {
            Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => {
                let k = private.ok_or("--auth-token: auth: missing key data (priv-key)")?;
                (Some(EncodingKey::from_secret(&k)), DecodingKey::from_secret(&k))
            }
            _ => {
                let (enc, dec): (fn(&[u8]) -> _, fn(&[u8]) -> _) = match alg {
                    Algorithm::ES256 | Algorithm::ES384 => (EncodingKey::from_ec_pem, DecodingKey::from_ec_pem),
                    Algorithm::EdDSA => (EncodingKey::from_ed_pem, DecodingKey::from_ed_pem),
                    _ => (EncodingKey::from_rsa_pem, DecodingKey::from_rsa_pem),
                };
                let e = private.as_ref().map(|k| enc(k)).transpose().map_err(bad)?;
                let d = match (&public, &private) {
                    (Some(p), _) => dec(p).map_err(bad)?,
                    (None, Some(k)) => derived_public(alg, k)?,
                    // etcd: neither key → "auth: missing key data".
                    (None, None) => return Err("--auth-token: auth: missing key data (pub-key or priv-key)".into()),
                };
                (e, d)
            }
        };
        Ok(JwtTokens { alg, enc, dec, ttl })
    }

    /// A signed token for `user` at auth revision `rev`.
    pub fn assign(&self, user: &str, rev: u64) -> Result<String, AuthError> {
        let Some(key) = &self.enc else {
            return Err(AuthError::Other("auth: token signing attempted with verify-only key".into()));
        };
        let exp = (SystemTime::now() + self.ttl).duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let claims = serde_json::json!({ "username": user, "revision": rev, "exp": exp });
        jsonwebtoken::encode(&Header::new(self.alg), &claims, key).map_err(|e| AuthError::Other(e.to_string()))
    }

    /// The user and auth revision of a valid, unexpired token.
    pub fn info(&self, token: &str) -> Option<(String, u64)> {
        let mut v = Validation::new(self.alg);
        v.required_spec_claims.clear();
        v.leeway = 0;
        let data = jsonwebtoken::decode::<serde_json::Value>(token, &self.dec, &v).ok()?;
        let user = data.claims.get("username")?.as_str()?.to_string();
        let rev = data.claims.get("revision")?.as_f64()? as u64;
        Some((user, rev))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_as_etcd_parses_them() {
        assert!(JwtTokens::parse("jwt,sign-method=RS256,sign-method=RS256").unwrap_err().contains("invalid auth options"));
        assert!(JwtTokens::parse("jwt,ttl").unwrap_err().contains("invalid auth options"));
        assert!(JwtTokens::parse("jwt,sign-method=XX1").unwrap_err().contains("signature method"));
        let dir = std::env::temp_dir().join(format!("jwt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("hmac");
        std::fs::write(&key, b"secret").unwrap();
        let t = JwtTokens::parse(&format!("jwt,priv-key={},sign-method=HS256,ttl=1s", key.display())).unwrap();
        let tok = t.assign("alice", 7).unwrap();
        assert_eq!(tok.split('.').count(), 3);
        assert_eq!(t.info(&tok), Some(("alice".into(), 7)));
        assert_eq!(t.info(&(tok.clone() + "x")), None);
        std::thread::sleep(Duration::from_millis(2100));
        assert_eq!(t.info(&tok), None, "expired");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// priv-key alone: the verifying key is derived (ECDSA and Ed25519 here; RSA in the e2e test,
    /// ring cannot generate RSA keys), and a token it signs verifies.
    #[test]
    fn a_private_key_alone_signs_and_verifies() {
        use ring::signature::{EcdsaKeyPair, Ed25519KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
        let rng = ring::rand::SystemRandom::new();
        let dir = std::env::temp_dir().join(format!("jwt-derive-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ec = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let ed = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
        for (method, der) in [("ES256", ec.as_ref()), ("EdDSA", ed.as_ref())] {
            let key = dir.join(method);
            std::fs::write(&key, pem::encode(&pem::Pem::new("PRIVATE KEY", der.to_vec()))).unwrap();
            let t = JwtTokens::parse(&format!("jwt,priv-key={},sign-method={method}", key.display())).unwrap();
            let tok = t.assign("alice", 3).unwrap();
            assert_eq!(t.info(&tok), Some(("alice".into(), 3)), "{method}");
        }
        assert!(JwtTokens::parse("jwt,sign-method=RS256").unwrap_err().contains("missing key data"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

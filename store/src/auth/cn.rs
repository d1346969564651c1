//! The subject common name of an X.509 certificate (DER), which etcd takes as
//! the user name of a client that presents a verified certificate and no token
//! (AuthInfoFromTLS). Only the path to the subject is walked:
//! Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version OPTIONAL,
//! serialNumber, signature, issuer, validity, subject, ... }, ... }.

/// One DER element: (tag, contents, rest).
fn element(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, b) = b.split_first()?;
    let (&l, mut b) = b.split_first()?;
    let len = if l < 0x80 {
        l as usize
    } else {
        let n = (l & 0x7f) as usize;
        if n == 0 || n > 4 || b.len() < n {
            return None;
        }
        let len = b[..n].iter().fold(0usize, |a, &x| (a << 8) | x as usize);
        b = &b[n..];
        len
    };
    if b.len() < len {
        return None;
    }
    Some((tag, &b[..len], &b[len..]))
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID_CN: &[u8] = &[0x55, 0x04, 0x03]; // 2.5.4.3

/// The last common name of the subject, as Go's pkix.Name.CommonName.
pub fn common_name(der: &[u8]) -> Option<String> {
    let (tag, cert, _) = element(der)?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, tbs, _) = element(cert)?;
    if tag != SEQUENCE {
        return None;
    }
    let mut rest = tbs;
    let (tag, _, r) = element(rest)?;
    if tag == 0xa0 {
        rest = r; // explicit version
    }
    // serialNumber, signature, issuer, validity
    for _ in 0..4 {
        rest = element(rest)?.2;
    }
    let (tag, mut rdns, _) = element(rest)?;
    if tag != SEQUENCE {
        return None;
    }
    let mut cn = None;
    while !rdns.is_empty() {
        let (tag, mut set, r) = element(rdns)?;
        rdns = r;
        if tag != SET {
            return None;
        }
        while !set.is_empty() {
            let (_, atv, r) = element(set)?;
            set = r;
            let (tag, oid, r) = element(atv)?;
            if tag == 0x06 && oid == OID_CN {
                let (_, value, _) = element(r)?;
                cn = Some(String::from_utf8_lossy(value).into_owned());
            }
        }
    }
    cn
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tlv(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        if body.len() < 0x80 {
            v.push(body.len() as u8);
        } else {
            v.extend_from_slice(&[0x82, (body.len() >> 8) as u8, body.len() as u8]);
        }
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn finds_the_subject_cn() {
        let name = |cn: &str| {
            let o = tlv(SET, &tlv(SEQUENCE, &[tlv(0x06, &[0x55, 0x04, 0x0a]), tlv(0x0c, b"org")].concat()));
            let c = tlv(SET, &tlv(SEQUENCE, &[tlv(0x06, OID_CN), tlv(0x0c, cn.as_bytes())].concat()));
            tlv(SEQUENCE, &[o, c].concat())
        };
        let tbs = tlv(
            SEQUENCE,
            &[tlv(0xa0, &tlv(0x02, &[2])), tlv(0x02, &[1; 200]), tlv(SEQUENCE, &[]), name("issuer"), tlv(SEQUENCE, &[]), name("alice")].concat(),
        );
        let cert = tlv(SEQUENCE, &[tbs, tlv(SEQUENCE, &[]), tlv(0x03, &[0])].concat());
        assert_eq!(common_name(&cert).as_deref(), Some("alice"));
        assert_eq!(common_name(&cert[..10]), None);
    }
}

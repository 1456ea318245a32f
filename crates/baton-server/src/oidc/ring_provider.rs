//! jsonwebtoken's cryptography on ring, the library rustls already uses here, rather than on a
//! second stack (its RustCrypto provider would add some forty crates, the `rsa` crate among
//! them). ring does the mathematics; this module only maps JWT algorithms to ring's.
//!
//! Only the algorithms of [`super::ALGORITHMS`] exist here: RS256/384/512 and PS256/384/512
//! (RSA of 2048 to 8192 bits) and ES256/384 (fixed-length signatures, as JWS writes them). HMAC
//! and EdDSA are refused, as by the server before it. Signing is here for the tests' fake
//! issuer and for JWKs made from a private key; the server only verifies.

use jsonwebtoken::crypto::{CryptoProvider, JwtSigner, JwtVerifier, KeyUtils};
use jsonwebtoken::errors::{ErrorKind, Result};
use jsonwebtoken::jwk::{EllipticCurve, ThumbprintHash};
use jsonwebtoken::signature::{Error as SignatureError, Signer, Verifier};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey, DecodingKeyKind, EncodingKey};
use ring::rand::SystemRandom;
use ring::signature::{self as ring_sig, RsaPublicKeyComponents, VerificationAlgorithm};

/// The provider.
pub static PROVIDER: CryptoProvider = CryptoProvider {
    signer_factory,
    verifier_factory,
    key_utils: KeyUtils {
        rsa_pub_components_from_private_key,
        rsa_pub_components_from_public_key,
        ec_pub_components_from_private_key,
        ed_pub_components_from_private_key: |_, _| Err(ErrorKind::InvalidAlgorithm.into()),
        compute_digest,
    },
};

/// Makes [`PROVIDER`] jsonwebtoken's for this process, before anything else picks one (with no
/// provider feature on, nothing else can). Idempotent.
pub fn install() {
    let _ = CryptoProvider::install_default(&PROVIDER);
}

/// ring's verification algorithm for `alg`, and the key family it needs.
fn verification(alg: Algorithm) -> Result<(&'static dyn VerificationAlgorithm, AlgorithmFamily)> {
    if let Some(rsa) = rsa_parameters(alg) {
        return Ok((rsa, AlgorithmFamily::Rsa));
    }
    Ok(match alg {
        Algorithm::ES256 => (&ring_sig::ECDSA_P256_SHA256_FIXED, AlgorithmFamily::Ec),
        Algorithm::ES384 => (&ring_sig::ECDSA_P384_SHA384_FIXED, AlgorithmFamily::Ec),
        _ => return Err(ErrorKind::InvalidAlgorithm.into()),
    })
}

/// A public key and the algorithm it verifies with.
struct RingVerifier {
    alg: Algorithm,
    verification: &'static dyn VerificationAlgorithm,
    key: DecodingKeyKind,
}

impl Verifier<Vec<u8>> for RingVerifier {
    fn verify(
        &self,
        message: &[u8],
        signature: &Vec<u8>,
    ) -> std::result::Result<(), SignatureError> {
        let checked = match &self.key {
            // A JWK's RSA key: its modulus and exponent, verified with the RSA parameters of
            // the algorithm (the same objects [`verification`] gives).
            DecodingKeyKind::RsaModulusExponent { n, e } => {
                let parameters = rsa_parameters(self.alg).ok_or_else(SignatureError::new)?;
                RsaPublicKeyComponents { n, e }.verify(parameters, message, signature)
            }
            // An EC point (0x04, x, y), or an RSA public key's DER.
            DecodingKeyKind::SecretOrDer(bytes) => {
                ring_sig::UnparsedPublicKey::new(self.verification, bytes)
                    .verify(message, signature)
            }
        };
        checked.map_err(|_| SignatureError::new())
    }
}

impl JwtVerifier for RingVerifier {
    fn algorithm(&self) -> Algorithm {
        self.alg
    }
}

/// ring's RSA parameters for an RSA algorithm; `None` for any other.
fn rsa_parameters(alg: Algorithm) -> Option<&'static ring_sig::RsaParameters> {
    Some(match alg {
        Algorithm::RS256 => &ring_sig::RSA_PKCS1_2048_8192_SHA256,
        Algorithm::RS384 => &ring_sig::RSA_PKCS1_2048_8192_SHA384,
        Algorithm::RS512 => &ring_sig::RSA_PKCS1_2048_8192_SHA512,
        Algorithm::PS256 => &ring_sig::RSA_PSS_2048_8192_SHA256,
        Algorithm::PS384 => &ring_sig::RSA_PSS_2048_8192_SHA384,
        Algorithm::PS512 => &ring_sig::RSA_PSS_2048_8192_SHA512,
        _ => return None,
    })
}

fn verifier_factory(alg: &Algorithm, key: &DecodingKey) -> Result<Box<dyn JwtVerifier>> {
    let (verification, family) = verification(*alg)?;
    if key.family() != family {
        return Err(ErrorKind::InvalidKeyFormat.into());
    }
    Ok(Box::new(RingVerifier {
        alg: *alg,
        verification,
        key: key.kind().clone(),
    }))
}

/// A private key (PKCS#1 DER for RSA, PKCS#8 for EC) and how it signs.
struct RingSigner {
    alg: Algorithm,
    key: SigningKey,
}

enum SigningKey {
    Rsa(ring_sig::RsaKeyPair, &'static dyn ring_sig::RsaEncoding),
    Ec(ring_sig::EcdsaKeyPair),
}

impl Signer<Vec<u8>> for RingSigner {
    fn try_sign(&self, message: &[u8]) -> std::result::Result<Vec<u8>, SignatureError> {
        let rng = SystemRandom::new();
        match &self.key {
            SigningKey::Rsa(pair, encoding) => {
                let mut signature = vec![0; pair.public().modulus_len()];
                pair.sign(*encoding, &rng, message, &mut signature)
                    .map_err(|_| SignatureError::new())?;
                Ok(signature)
            }
            SigningKey::Ec(pair) => pair
                .sign(&rng, message)
                .map(|signature| signature.as_ref().to_vec())
                .map_err(|_| SignatureError::new()),
        }
    }
}

impl JwtSigner for RingSigner {
    fn algorithm(&self) -> Algorithm {
        self.alg
    }
}

fn signer_factory(alg: &Algorithm, key: &EncodingKey) -> Result<Box<dyn JwtSigner>> {
    let rsa = |encoding: &'static dyn ring_sig::RsaEncoding| -> Result<SigningKey> {
        let pair = ring_sig::RsaKeyPair::from_der(key.as_bytes())
            .map_err(|e| ErrorKind::InvalidRsaKey(e.to_string()))?;
        Ok(SigningKey::Rsa(pair, encoding))
    };
    let ec = |signing: &'static ring_sig::EcdsaSigningAlgorithm| -> Result<SigningKey> {
        let pair =
            ring_sig::EcdsaKeyPair::from_pkcs8(signing, key.as_bytes(), &SystemRandom::new())
                .map_err(|_| ErrorKind::InvalidEcdsaKey)?;
        Ok(SigningKey::Ec(pair))
    };
    let signing_key = match alg {
        Algorithm::RS256 => rsa(&ring_sig::RSA_PKCS1_SHA256)?,
        Algorithm::RS384 => rsa(&ring_sig::RSA_PKCS1_SHA384)?,
        Algorithm::RS512 => rsa(&ring_sig::RSA_PKCS1_SHA512)?,
        Algorithm::PS256 => rsa(&ring_sig::RSA_PSS_SHA256)?,
        Algorithm::PS384 => rsa(&ring_sig::RSA_PSS_SHA384)?,
        Algorithm::PS512 => rsa(&ring_sig::RSA_PSS_SHA512)?,
        Algorithm::ES256 => ec(&ring_sig::ECDSA_P256_SHA256_FIXED_SIGNING)?,
        Algorithm::ES384 => ec(&ring_sig::ECDSA_P384_SHA384_FIXED_SIGNING)?,
        _ => return Err(ErrorKind::InvalidAlgorithm.into()),
    };
    Ok(Box::new(RingSigner {
        alg: *alg,
        key: signing_key,
    }))
}

fn rsa_pub_components_from_private_key(der: &[u8]) -> Result<(Vec<u8>, Vec<u8>)> {
    let pair =
        ring_sig::RsaKeyPair::from_der(der).map_err(|e| ErrorKind::InvalidRsaKey(e.to_string()))?;
    let components = RsaPublicKeyComponents::<Vec<u8>>::from(pair.public());
    Ok((components.n, components.e))
}

/// Not needed: keys reach the server as JWKs, whose components are given.
fn rsa_pub_components_from_public_key(_der: &[u8]) -> Result<(Vec<u8>, Vec<u8>)> {
    Err(ErrorKind::InvalidKeyFormat.into())
}

fn ec_pub_components_from_private_key(
    der: &[u8],
    alg: Algorithm,
) -> Result<(EllipticCurve, Vec<u8>, Vec<u8>)> {
    use ring::signature::KeyPair;
    let (signing, curve, coordinate_len) = match alg {
        Algorithm::ES256 => (
            &ring_sig::ECDSA_P256_SHA256_FIXED_SIGNING,
            EllipticCurve::P256,
            32,
        ),
        Algorithm::ES384 => (
            &ring_sig::ECDSA_P384_SHA384_FIXED_SIGNING,
            EllipticCurve::P384,
            48,
        ),
        _ => return Err(ErrorKind::InvalidEcdsaKey.into()),
    };
    let pair = ring_sig::EcdsaKeyPair::from_pkcs8(signing, der, &SystemRandom::new())
        .map_err(|_| ErrorKind::InvalidEcdsaKey)?;
    // The uncompressed point: 0x04, x, y.
    let point = pair.public_key().as_ref();
    if point.len() != 1 + 2 * coordinate_len || point[0] != 4 {
        return Err(ErrorKind::InvalidEcdsaKey.into());
    }
    let (x, y) = point[1..].split_at(coordinate_len);
    Ok((curve, x.to_vec(), y.to_vec()))
}

fn compute_digest(data: &[u8], hash: ThumbprintHash) -> Result<Vec<u8>> {
    let algorithm = match hash {
        ThumbprintHash::SHA256 => &ring::digest::SHA256,
        ThumbprintHash::SHA384 => &ring::digest::SHA384,
        ThumbprintHash::SHA512 => &ring::digest::SHA512,
        _ => return Err(ErrorKind::InvalidAlgorithm.into()),
    };
    Ok(ring::digest::digest(algorithm, data).as_ref().to_vec())
}

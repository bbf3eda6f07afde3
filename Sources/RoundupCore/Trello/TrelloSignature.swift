import Crypto
import Foundation

/// Trello's webhook signature: `X-Trello-Webhook` = base64(HMAC-SHA1(secret, body + callbackURL)).
public enum TrelloSignature {
    /// The header value Trello would send for this body and callback URL.
    public static func sign(secret: String, body: some Collection<UInt8>, callbackURL: String) -> String {
        Data(mac(secret: secret, body: body, callbackURL: callbackURL)).base64EncodedString()
    }

    /// Checks a header against the body and callback URL, in constant time.
    public static func verify(header: String, secret: String, body: some Collection<UInt8>, callbackURL: String) -> Bool {
        if let result = body.withContiguousStorageIfAvailable({
            verify(header: header, secret: secret, body: UnsafeRawBufferPointer($0), callbackURL: callbackURL)
        }) {
            return result
        }
        return Array(body).withUnsafeBytes { verify(header: header, secret: secret, body: $0, callbackURL: callbackURL) }
    }

    /// The same, for bytes in memory (the ingress's hot path: no generic dispatch, no copy).
    public static func verify(header: String, secret: String, body: UnsafeRawBufferPointer, callbackURL: String) -> Bool {
        guard let given = Data(base64Encoded: header), given.count == Insecure.SHA1.byteCount else { return false }
        var hmac = HMAC<Insecure.SHA1>(key: SymmetricKey(data: Array(secret.utf8)))
        hmac.update(data: body)
        hmac.update(data: Array(callbackURL.utf8))
        let expected = hmac.finalize()
        // HashedAuthenticationCode's == compares in constant time.
        return expected == given
    }

    private static func mac(secret: String, body: some Collection<UInt8>, callbackURL: String) -> [UInt8] {
        var hmac = HMAC<Insecure.SHA1>(key: SymmetricKey(data: Array(secret.utf8)))
        hmac.update(data: Array(body))
        hmac.update(data: Array(callbackURL.utf8))
        return Array(hmac.finalize())
    }
}

/// Constant-time comparison of two secrets.
public func constantTimeEquals(_ a: some Collection<UInt8>, _ b: some Collection<UInt8>) -> Bool {
    var difference = UInt8(truncatingIfNeeded: a.count ^ b.count)
    if a.count != b.count {
        // Still walk the given input so timing does not depend on where a mismatch is.
        for byte in a { difference |= byte ^ byte }
        return false
    }
    for (x, y) in zip(a, b) { difference |= x ^ y }
    return difference == 0
}

/// Shows no more than the last four characters of a secret.
public func maskSecret(_ secret: String?) -> String? {
    guard let secret, !secret.isEmpty else { return nil }
    let visible = secret.count > 8 ? 4 : 0
    return String(repeating: "•", count: 8) + secret.suffix(visible)
}

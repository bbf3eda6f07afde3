public import Crypto
public import Foundation
import Metrics
import NIOConcurrencyHelpers

/// The provider token APNs wants in `authorization: bearer …`: an ES256 JWT (`alg`, `kid`; `iss` = team id, `iat`)
/// signed with the `.p8` key. Made once and reused until `lifetime` has passed (APNs refuses tokens older than an hour
/// and throttles providers that renew more often than every 20 minutes), or until APNs says it expired.
public final class APNsTokenProvider: Sendable {
    public struct Token: Sendable, Equatable {
        public var value: String
        public var issuedAt: Date
    }

    let key: P256.Signing.PrivateKey
    public let keyID: String
    public let teamID: String
    public let lifetime: TimeInterval
    private let current = NIOLockedValueBox<Token?>(nil)

    public init(key: P256.Signing.PrivateKey, keyID: String, teamID: String, lifetime: TimeInterval = 40 * 60) {
        self.key = key
        self.keyID = keyID
        self.teamID = teamID
        self.lifetime = lifetime
    }

    /// Reads a `.p8` file (PKCS#8 PEM, as Apple hands it out).
    public convenience init(keyFile: String, keyID: String, teamID: String, lifetime: TimeInterval = 40 * 60) throws {
        let pem = try String(contentsOfFile: keyFile, encoding: .utf8)
        self.init(key: try P256.Signing.PrivateKey(pemRepresentation: pem), keyID: keyID, teamID: teamID, lifetime: lifetime)
    }

    /// The token to send now. (The time is read under the lock: a caller holding an older "now" must not take a token
    /// made a moment later for one from the future and make yet another.)
    public func token(now given: Date? = nil) -> Token {
        current.withLockedValue { current in
            let now = given ?? Date()
            if let token = current, now.timeIntervalSince(token.issuedAt) < lifetime, now.timeIntervalSince(token.issuedAt) > -300 { return token }
            let token = Token(value: Self.make(key: key, keyID: keyID, teamID: teamID, issuedAt: now), issuedAt: now)
            current = token
            Counter(label: "roundup_apns_token_renewals_total").increment()
            return token
        }
    }

    /// APNs said `ExpiredProviderToken` for `token`: the next call makes a new one — once, however many requests
    /// failed with the same token.
    public func expire(_ token: Token) {
        current.withLockedValue { current in
            if current == token { current = nil }
        }
    }

    static func base64URL(_ bytes: some Sequence<UInt8>) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    public static func make(key: P256.Signing.PrivateKey, keyID: String, teamID: String, issuedAt: Date) -> String {
        let header = #"{"alg":"ES256","kid":"\#(keyID)"}"#
        let claims = #"{"iss":"\#(teamID)","iat":\#(Int(issuedAt.timeIntervalSince1970))}"#
        let input = base64URL(Array(header.utf8)) + "." + base64URL(Array(claims.utf8))
        // ES256 in a JWS is the raw r‖s pair (64 bytes), not DER.
        let signature = (try? key.signature(for: Array(input.utf8)))?.rawRepresentation ?? Data()
        return input + "." + base64URL(signature)
    }
}

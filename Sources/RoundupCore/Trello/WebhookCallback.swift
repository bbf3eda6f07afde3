/// The URL Trello calls for an account: `{public URL}/dailyroundup/webhook/trello/{account id}/{callback token}`.
///
/// Trello signs a webhook with the secret of the app key it was registered with, and every account that uses the
/// same app key (all users of one app, typically) holds that same secret: the signature proves a body came from
/// Trello *or from another account on the key*. The callback token — 256 random bits, one per account, known only to
/// the server and to Trello — proves the caller was given this account's URL. A delivery that carries it is trusted
/// as it is; one to an older URL without it (`/trello/{account id}` or `/trello`) is accepted but every change it
/// describes is read again from Trello with the account's own credentials before it reaches the apps, so a forged
/// payload can change nothing they see. Reconciliation moves old webhooks to the new URL.
public enum WebhookCallback {
    public static let basePath = "/dailyroundup/webhook/trello"

    public static func path(account: String, token: String) -> String { basePath + "/" + account + "/" + token }

    public static func url(publicURL: String, account: String, token: String) -> String { publicURL + path(account: account, token: token) }

    /// A new callback token: 32 bytes from the system's cryptographic generator, as lower-case hexadecimal.
    public static func makeToken() -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        return bytes.withUnsafeBytes { Hex.lowercase($0) }
    }

    /// 64 lower-case hexadecimal characters.
    @inlinable
    public static func isToken(_ text: some StringProtocol) -> Bool {
        let utf8 = text.utf8
        return utf8.count == 64 && utf8.allSatisfy(IdentifierShape.isLowerHex)
    }
}

/// What our webhooks are called in Trello (its webhook list, `GET /1/tokens/{token}/webhooks`): one wording whoever
/// registers them, the pairing or a reconciliation repairing one.
public enum WebhookDescription {
    /// A synced list's webhook.
    public static func list(_ name: String) -> String { "DailyRoundup list \(name)" }
    /// The board webhook an account's lists on one board share (label changes and cards moved in from other lists).
    public static let board = "DailyRoundup board"
}

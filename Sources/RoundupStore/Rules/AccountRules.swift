package import Foundation
package import RoundupCore

// The account's and the review's rules, once for both stores: each backend reads the row (SQLite in its write
// transaction, PostgreSQL under the row's lock), asks the rule, and writes what the rule answers. The SQL holds no
// decision of its own.

extension AccountDetails {
    /// `PUT /dailyroundup/account`'s rule: a field given replaces the stored one, a field left out (nil) keeps it; new
    /// Trello credentials (a token or an API key) clear `needs_attention`, since what flagged the account (a revoked
    /// token, an unreachable board) was about the old ones; a new webhook secret, policy or delete mode does not.
    package func applying(_ update: AccountUpdate, at now: String) -> AccountDetails {
        var next = self
        next.trelloAPIKey = update.trelloAPIKey ?? trelloAPIKey
        next.trelloToken = update.trelloToken ?? trelloToken
        next.trelloWebhookSecret = update.trelloWebhookSecret ?? trelloWebhookSecret
        next.conflictPolicy = update.conflictPolicy ?? conflictPolicy
        next.deleteMode = update.deleteMode ?? deleteMode
        next.timeZone = update.timeZone ?? timeZone
        next.updatedAt = now
        if update.changesCredentials { next.needsAttention = nil }
        return next
    }

    /// What the outbound rules use for an account the store does not have (deleted while a job ran): conflicts wait for
    /// the user, and a reminder deleted on a device archives its card rather than deleting it. The schema's defaults
    /// for a new account are the same (`SchemaVocabularyTests.aNewAccountHasTheDefaultPolicy` checks both backends).
    package static let missingAccountPolicy: (policy: ConflictPolicy, deleteMode: DeleteMode) = (.manual, .archive)
}

extension AccountUpdate {
    /// Whether the update gives new Trello credentials.
    package var changesCredentials: Bool { trelloToken != nil || trelloAPIKey != nil }
}

/// One resolution at a time per conflict or duplicate: a resolution claims the row while it writes to Trello, and a
/// second one (a double tap, a retry, another device) is refused meanwhile. A claim older than `lifetime` died with its
/// request (a crash, a lost connection) and may be taken over.
package struct ResolutionClaim: Sendable {
    package static let lifetime: TimeInterval = 60
    package var now: Date

    package init(now: Date = Date()) { self.now = now }

    /// The stamp to store in `resolving_at`, or nil when the claim is refused: the row is no longer open, or a live
    /// claim holds it. Stamps are `Timestamp` strings, whose order is their time's.
    package func claim(open: Bool, heldSince: String?) -> String? {
        guard open else { return nil }
        if let held = heldSince, held >= Timestamp.string(now.addingTimeInterval(-Self.lifetime)) { return nil }
        return Timestamp.string(now)
    }
}

/// Possible duplicates (a reminder whose new card looks like one already on the board): one open per reminder. A
/// second sighting of the same reminder rewrites the open one (its card, title, due date, fields, job) instead of
/// asking the user twice; a resolved one stays as it was resolved, and a later sighting opens a new one.
package enum PotentialDuplicates {
    /// The reminder's open duplicate among its stored ones, which a new sighting rewrites; nil: insert a new one.
    package static func rewritten(among stored: [(id: Int64, status: DuplicateStatus)]) -> Int64? {
        stored.first { $0.status == .open }?.id
    }
}

extension ResolutionTable {
    /// Whether a row's stored status is open: the only rows a resolution may claim.
    package func isOpen(_ status: String) throws -> Bool {
        switch self {
        case .conflicts: try ConflictStatus.stored(status) == .open
        case .duplicates: try DuplicateStatus.stored(status) == .open
        }
    }
}

extension SyncTaskRecord {
    /// Which of a reminder's card rows it maps to: its live card (in the list, not a placeholder); else its placeholder
    /// (a create in flight); else the card it had, gone from the list. Among equals, the first (the newest, as
    /// `CardStateRepository.tasks(accountID:reminderID:)` answers).
    package static func mapping(among rows: [SyncTaskRecord]) -> SyncTaskRecord? {
        rows.first(where: \.isLive) ?? rows.first(where: \.isPlaceholder) ?? rows.first
    }

    /// A card the store holds as present in its list: not gone, not a placeholder.
    package var isLive: Bool { Self.isLive(cardID: cardID, deleted: deleted) }

    package static func isLive(cardID: String, deleted: Bool) -> Bool { !deleted && !cardID.hasPrefix(placeholderPrefix) }
}

/// Flagging an account for its user (`needs_attention`) after a Trello answer about its token.
package enum AttentionFlag {
    /// Whether a flag decided against `whileToken` (the token that failed) still applies to the account as stored: it
    /// does only while the account still has that token — a user who saved a new one meanwhile is not flagged for the
    /// old. A flag decided without a token (or its clearing) always applies. Tokens are compared in constant time.
    package static func applies(storedToken: String?, whileToken: String?) -> Bool {
        guard let whileToken else { return true }
        guard let storedToken else { return false }
        return constantTimeEquals(Array(storedToken.utf8), Array(whileToken.utf8))
    }
}

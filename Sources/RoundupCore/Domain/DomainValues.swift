// The domain's closed sets of values, each in one place. Raw values are what the columns, the JSON and the metric
// labels hold, so the stored text and the wire format stay as they were; the CHECK constraints in the migrations
// name the same values.

/// What a pending change tells the apps to do with a reminder.
public enum ChangeType: String, Sendable, Hashable, CaseIterable, Codable {
    case create, update, complete, delete
    /// The card moved from one synced list of the account to another (`from_sync_list_id`): the same reminder, in the
    /// list `sync_list_id` names, with the card's every field.
    case move

    /// The `change_type` a store writes: a move is stored as an update whose `from_sync_list_id` is set (the column's
    /// CHECK predates moves, and SQLite changes a CHECK only by rebuilding the table).
    public var storedName: String { self == .move ? "update" : rawValue }
}

/// What an app asks the server to do to a card (`POST /dailyroundup/sync`).
public enum SyncOp: String, Sendable, Hashable, CaseIterable, Codable {
    case create, update, complete, delete
    /// The reminder moved to the list `sync_list_id` names: its card moves there (`idList`, and `idBoard` across
    /// boards), then the fields the item names are written as an update's.
    case move
}

/// The operation an item of a job's results stands for: an app's edit, or a reconciliation's summary.
public enum JobItemOp: String, Sendable, Hashable, CaseIterable, Codable {
    case create, update, complete, delete, move, reconcile

    public init(_ op: SyncOp) {
        switch op {
        case .create: self = .create
        case .update: self = .update
        case .complete: self = .complete
        case .delete: self = .delete
        case .move: self = .move
        }
    }
}

/// What became of one item of a job.
public enum ItemStatus: String, Sendable, Hashable, CaseIterable, Codable {
    case ok, conflict, duplicate, error
    /// The list's settings keep this edit from Trello (a list that syncs from Trello only, a field that does):
    /// nothing was written.
    case skipped
}

/// The kinds of background job (`background_jobs.kind`).
public enum JobKind: String, Sendable, Hashable, CaseIterable, Codable {
    /// The apps' edits, sent to Trello.
    case sync
    /// A Trello list's open cards, sent to the apps as creates.
    case `import`
    /// A list compared with Trello, drift repaired.
    case reconcile
    /// A list's cards' link attachments appended to their descriptions, then deleted (uploads stay).
    case migrateLinks = "migrate_links"
}

/// A job's state as stored (`background_jobs.status`).
public enum JobStatus: String, Sendable, Hashable, CaseIterable, Codable {
    case queued, running, completed, error
}

/// A job's end as the sync metrics count it: how it finished, or that it was given up as stale.
public enum JobOutcome: String, Sendable, Hashable, CaseIterable {
    case completed, error, stale
}

/// Who wins when both sides changed one field (`accounts.conflict_policy`).
public enum ConflictPolicy: String, Sendable, Hashable, CaseIterable, Codable {
    /// Keep both and record a conflict for the user.
    case manual
    /// Last writer wins, by modification time.
    case lww
    case preferTrello = "prefer_trello"
    case preferReminders = "prefer_reminders"
}

/// What deleting a reminder does to its card (`accounts.delete_mode`).
public enum DeleteMode: String, Sendable, Hashable, CaseIterable, Codable {
    case archive, delete
}

/// An open conflict, or one the user resolved (`conflicts.status`).
public enum ConflictStatus: String, Sendable, Hashable, CaseIterable, Codable {
    case open, resolved
}

/// The side the user chose for a conflict (`conflicts.resolution`, the `choice` of the resolve endpoint).
public enum ConflictChoice: String, Sendable, Hashable, CaseIterable, Codable {
    case trello, reminders
    /// A value the user typed.
    case value
}

/// A possible duplicate: open, or resolved one of two ways (`potential_duplicates.status`).
public enum DuplicateStatus: String, Sendable, Hashable, CaseIterable, Codable {
    case open, merged
    case keptBoth = "kept_both"
}

/// The user's answer to a possible duplicate (the `action` of the resolve endpoint).
public enum DuplicateAction: String, Sendable, Hashable, CaseIterable, Codable {
    case merge
    case keepBoth = "keep_both"

    /// The status a duplicate resolved this way is stored with.
    public var status: DuplicateStatus {
        switch self {
        case .merge: .merged
        case .keepBoth: .keptBoth
        }
    }
}

/// The Apple platform of a registered device.
public enum DevicePlatform: String, Sendable, Hashable, CaseIterable, Codable {
    case ios, macos
}

/// The APNs environment a device token belongs to.
public enum APNsEnvironment: String, Sendable, Hashable, CaseIterable, Codable {
    case production, sandbox
}

/// Why an account needs its user (`accounts.needs_attention`).
public enum AttentionReason: String, Sendable, Hashable, CaseIterable, Codable {
    case trelloTokenRevoked = "trello_token_revoked"
}

/// An app's bundle id, the APNs topic of its pushes: reverse DNS (`app.dailyroundup.ios`), letters, digits, `-` and
/// `.`, at most 155 characters.
public struct BundleID: RawRepresentable, Sendable, Hashable, Codable, CustomStringConvertible {
    public let rawValue: String

    public init?(rawValue: String) {
        let parts = rawValue.split(separator: ".", omittingEmptySubsequences: false)
        guard rawValue.utf8.count <= 155, parts.count >= 2,
            parts.allSatisfy({
                !$0.isEmpty
                    && $0.utf8.allSatisfy {
                        $0 == UInt8(ascii: "-") || (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0)
                    }
            })
        else { return nil }
        self.rawValue = rawValue
    }

    public var description: String { rawValue }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let value = BundleID(rawValue: text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not a bundle id: \(text)"))
        }
        self = value
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}

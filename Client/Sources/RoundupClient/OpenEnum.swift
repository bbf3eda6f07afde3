/// A value the server picks from a set that may grow. An app in the field must survive a server that learned a new
/// status: any text decodes, `known` tells whether this app knows it, and unknown values travel back unchanged.
///
///     switch change.changeType.known {
///     case .create?: ...
///     case nil: ...   // a newer server's value: skip it, or ask the user to update the app
///     }
public struct OpenEnum<Known>: RawRepresentable, Codable, Hashable, Sendable, CustomStringConvertible
where Known: RawRepresentable & CaseIterable & Hashable & Sendable, Known.RawValue == String {
    public let rawValue: String

    public init(rawValue: String) { self.rawValue = rawValue }
    public init(_ known: Known) { self.rawValue = known.rawValue }

    /// The value, when this version of the client knows it.
    public var known: Known? { Known(rawValue: rawValue) }
    public var description: String { rawValue }

    public init(from decoder: any Decoder) throws {
        rawValue = try decoder.singleValueContainer().decode(String.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }

    public static func == (value: OpenEnum, known: Known) -> Bool { value.rawValue == known.rawValue }
    public static func != (value: OpenEnum, known: Known) -> Bool { value.rawValue != known.rawValue }
}

/// The values this version of the client knows, for each set the server picks from (see `OpenEnum`).
public enum Roundup {
    /// `move`: the card moved between two synced lists; the reminder goes to `syncListId` from `fromSyncListId`.
    public enum ChangeType: String, CaseIterable, Sendable { case create, update, complete, delete, move }
    public enum FieldName: String, CaseIterable, Sendable {
        case title, notes, dueDate = "due_date", startDate = "start_date", completed, priority, priorityLevel = "priority_level", labels, checklists
        case url, location
        case attachments, trelloURL = "trello_url", dueReminderMinutes = "due_reminder_minutes"
    }
    public enum JobItemOp: String, CaseIterable, Sendable { case create, update, complete, delete, move, reconcile }
    public enum ItemStatus: String, CaseIterable, Sendable { case ok, conflict, duplicate, error, skipped }
    public enum JobKind: String, CaseIterable, Sendable { case sync, `import`, reconcile, migrateLinks = "migrate_links" }
    public enum JobStatus: String, CaseIterable, Sendable { case queued, running, completed, error }
    public enum DevicePlatform: String, CaseIterable, Sendable { case ios, macos }
    public enum APNsEnvironment: String, CaseIterable, Sendable { case production, sandbox }
    public enum ConflictStatus: String, CaseIterable, Sendable { case open, resolved }
    public enum DuplicateStatus: String, CaseIterable, Sendable { case open, merged, keptBoth = "kept_both" }
    public enum ConflictPolicy: String, CaseIterable, Sendable {
        case manual, lww, preferTrello = "prefer_trello", preferReminders = "prefer_reminders"
    }
    public enum DeleteMode: String, CaseIterable, Sendable { case archive, delete }
    public enum AttentionReason: String, CaseIterable, Sendable { case trelloTokenRevoked = "trello_token_revoked" }
    public enum ErrorCode: String, CaseIterable, Sendable {
        case invalidJSON = "invalid_json", badRequest = "bad_request", unauthorized, forbidden, notFound = "not_found"
        case methodNotAllowed = "method_not_allowed", conflict, jobRunning = "job_running", resolving
        case payloadTooLarge = "payload_too_large", unsupportedMediaType = "unsupported_media_type", unprocessable
        case rateLimited = "rate_limited", badGateway = "bad_gateway", unavailable, tooManyFailures = "too_many_failures"
        case tooManyStreams = "too_many_streams", streamsFull = "streams_full", `internal`
        case tooManyExports = "too_many_exports", tooManyDevices = "too_many_devices", unknownBundleID = "unknown_bundle_id"
    }
}

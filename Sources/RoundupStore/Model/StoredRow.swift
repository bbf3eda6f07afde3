import RoundupCore

/// A row of either store, read by column position: records decode themselves once from it, whichever store read it.
package protocol StoredRow {
    func text(_ column: Int) throws -> String
    func optionalText(_ column: Int) throws -> String?
    func int64(_ column: Int) throws -> Int64
    func bool(_ column: Int) throws -> Bool
}

extension StoredRow {
    /// A domain value stored as its raw text.
    package func value<Value: RawRepresentable>(_ column: Int, as type: Value.Type = Value.self) throws -> Value where Value.RawValue == String {
        try Value.stored(text(column))
    }

    package func optionalValue<Value: RawRepresentable>(_ column: Int, as type: Value.Type = Value.self) throws -> Value?
    where Value.RawValue == String {
        try optionalText(column).map(Value.stored)
    }
}

extension ConflictRecord {
    /// The columns `init(stored:)` reads, from `conflicts`.
    package static let columns = "id, sync_list_id, trello_card_id, reminder_id, field, trello_value, reminders_value, status, created_at"

    package init(stored row: some StoredRow) throws {
        self.init(
            id: try row.int64(0), syncListID: try row.optionalText(1), trelloCardID: try row.optionalText(2), reminderID: try row.optionalText(3),
            field: try row.text(4), trelloValue: try row.optionalText(5), remindersValue: try row.optionalText(6), status: try row.value(7),
            createdAt: try row.text(8))
    }
}

extension ConflictDetail {
    package static let columns = ConflictRecord.columns + ", resolution, resolved_at"

    package init(stored row: some StoredRow) throws {
        self.init(record: try ConflictRecord(stored: row), resolution: try row.optionalValue(9), resolvedAt: try row.optionalText(10))
    }
}

extension DuplicateRecord {
    /// The columns `init(stored:)` reads, from `potential_duplicates`.
    package static let columns = "id, sync_list_id, reminder_id, trello_card_id, title, due_date, status, created_at"

    package init(stored row: some StoredRow) throws {
        self.init(
            id: try row.int64(0), syncListID: try row.text(1), reminderID: try row.optionalText(2), trelloCardID: try row.text(3),
            title: try row.text(4),
            dueDate: try row.optionalText(5), status: try row.value(6), createdAt: try row.text(7))
    }
}

extension DuplicateDetail {
    package static let columns = DuplicateRecord.columns + ", fields, resolved_at"

    package init(stored row: some StoredRow) throws {
        self.init(record: try DuplicateRecord(stored: row), fields: PendingChangeCoding.fields(try row.text(8)), resolvedAt: try row.optionalText(9))
    }
}

extension DeviceRecord {
    /// The columns `init(stored:)` reads, from `devices`.
    package static let columns = "device_id, apns_token, platform, environment, created_at, updated_at, bundle_id"

    package init(stored r: some StoredRow) throws {
        self.init(
            deviceID: try r.text(0), apnsToken: try r.text(1), platform: try r.value(2), environment: try r.value(3), createdAt: try r.text(4),
            updatedAt: try r.text(5),
            bundleID: try r.optionalText(6).map { text in
                guard let id = BundleID(rawValue: text) else { throw UnknownStoredValue(type: "BundleID", value: text) }
                return id
            })
    }
}

extension ActivityRecord {
    /// The columns `init(stored:)` reads, from `activity`.
    package static let columns =
        "id, account_id, sync_list_id, trello_card_id, reminder_id, kind, side, field, old_value, new_value, rule, kept, message, job_id, trello_action_id, created_at"

    package init(stored r: some StoredRow) throws {
        self.init(
            id: try r.int64(0), accountID: try r.text(1), syncListID: try r.optionalText(2), cardID: try r.optionalText(3),
            reminderID: try r.optionalText(4), kind: try r.value(5), side: try r.optionalValue(6), field: try r.optionalText(7),
            oldValueJSON: try r.optionalText(8), newValueJSON: try r.optionalText(9), rule: try r.optionalValue(10), kept: try r.optionalValue(11),
            message: try r.optionalText(12), jobID: try r.optionalText(13), trelloActionID: try r.optionalText(14), createdAt: try r.text(15))
    }
}

extension MappingRecord {
    /// The columns `init(stored:)` reads, from `sync_tasks`.
    package static let columns = "id, sync_list_id, trello_card_id, reminder_id, deleted, last_synced_at, created_at, updated_at"

    package init(stored r: some StoredRow) throws {
        self.init(
            id: try r.int64(0), syncListID: try r.text(1), cardID: try r.text(2), reminderID: try r.optionalText(3), deleted: try r.bool(4),
            lastSyncedAt: try r.optionalText(5), createdAt: try r.text(6), updatedAt: try r.text(7))
    }
}

extension AccountDetails {
    /// The columns `init(stored:)` reads, from `accounts`.
    package static let columns =
        "id, trello_api_key, trello_token, trello_webhook_secret, conflict_policy, delete_mode, created_at, updated_at, needs_attention, time_zone"

    package init(stored r: some StoredRow) throws {
        self.init(
            id: try r.text(0), trelloAPIKey: try r.optionalText(1), trelloToken: try r.optionalText(2), trelloWebhookSecret: try r.optionalText(3),
            conflictPolicy: try r.value(4), deleteMode: try r.value(5), createdAt: try r.text(6), updatedAt: try r.text(7),
            needsAttention: try r.optionalValue(8), timeZone: try r.optionalText(9).map(AccountTimeZone.init(stored:)))
    }
}

extension StoredRow {
    /// A column holding an integer count.
    func int(_ column: Int) throws -> Int { Int(try int64(column)) }

    /// A column holding canonical JSON text; nil when it does not parse.
    func json(_ column: Int) throws -> JSONValue? {
        let text = try text(column)
        return try? JSONParser.parse(Array(text.utf8))
    }
}

extension AccountRecord {
    /// The columns `init(stored:)` reads, from `accounts`.
    package static let columns = "id, trello_api_key, trello_token, trello_webhook_secret, webhook_token"

    package init(stored r: some StoredRow) throws {
        self.init(
            id: try r.text(0), trelloAPIKey: try r.optionalText(1), trelloToken: try r.optionalText(2), trelloWebhookSecret: try r.optionalText(3),
            webhookToken: try r.optionalText(4))
    }
}

extension SyncJob {
    /// The columns `init(stored:)` reads, from `background_jobs`.
    package static let columns = "id, account_id, kind, status, device_id, processed, total, payload, results, error, created_at, updated_at"

    package init(stored r: some StoredRow) throws {
        self.init(
            id: try r.text(0), accountID: try r.text(1), kind: try r.value(2), status: try r.value(3), deviceID: try r.optionalText(4),
            processed: try r.int(5), total: try r.int(6), payload: try r.json(7) ?? .null,
            results: (try r.json(8)?.arrayValue ?? []).compactMap(SyncItemResult.init(json:)), error: try r.optionalText(9),
            createdAt: try r.text(10), updatedAt: try r.text(11))
    }
}

extension JobRecord {
    /// The columns `init(stored:)` reads, from `background_jobs`.
    package static let columns = "id, account_id, kind, status, processed, total, error, created_at, updated_at"

    package init(stored r: some StoredRow) throws {
        self.init(
            id: try r.text(0), accountID: try r.text(1), kind: try r.value(2), status: try r.value(3), processed: try r.int(4), total: try r.int(5),
            error: try r.optionalText(6), createdAt: try r.text(7), updatedAt: try r.text(8))
    }
}

extension JobLeaseRow {
    /// The columns `init(stored:accountID:)` reads, from `sync_lease`.
    package static let columns = "job_id, holder, expires_at, updated_at"

    package init(stored r: some StoredRow, accountID: String) throws {
        self.init(accountID: accountID, jobID: try r.text(0), holder: try r.text(1), expiresAt: try r.text(2), updatedAt: try r.text(3))
    }
}

extension AckedChange {
    /// The columns `init(stored:)` reads, from `pending_changes`.
    package static let columns = "account_id, trello_card_id, change_type, superseded"

    package init(stored r: some StoredRow) throws {
        self.init(accountID: try r.text(0), cardID: try r.text(1), type: try r.value(2), superseded: try r.bool(3))
    }
}

extension ListCardRecord {
    /// The columns `init(stored:)` reads, from `sync_tasks` (`field_values` as text); `live` picks a list's live cards
    /// (no create placeholder).
    package static func columns(values: String = "field_values") -> String {
        "id, trello_card_id, reminder_id, \(values), field_hashes, updated_at"
    }
    package static let live = "deleted = \(false) AND trello_card_id NOT LIKE '\(SyncTaskRecord.placeholderPrefix)%'"

    package init(stored r: some StoredRow) throws {
        self.init(
            id: try r.int64(0), cardID: try r.text(1), reminderID: try r.optionalText(2), values: try r.optionalText(3),
            stamps: FieldStamps.decodeStamps(try r.text(4)), updatedAt: try r.text(5))
    }
}

extension ChangeApplier.TaskRow {
    /// The columns `init(stored:)` reads, from `sync_tasks`.
    package static var columns: String { "sync_list_id, field_hashes, deleted, reminder_id, field_values IS NOT NULL" }

    package init(stored r: some StoredRow) throws {
        self.init(
            syncListID: try r.text(0), stamps: FieldStamps.decodeStamps(try r.text(1)), deleted: try r.bool(2), reminderID: try r.optionalText(3),
            hasValues: try r.bool(4))
    }
}

extension ChangeApplier.ChangeRow {
    /// The columns `init(stored:)` reads, from `pending_changes`.
    package static var columns: String { "id, change_type, changed_fields, fields, claimed_by, COALESCE(claimed_until, 0), from_sync_list_id" }

    package init(stored r: some StoredRow) throws {
        let from = try r.optionalText(6)
        let type: ChangeType = try r.value(1)
        self.init(
            id: try r.int64(0), type: from != nil && type == .update ? .move : type, changedFields: PendingChangeCoding.changedFields(try r.text(2)),
            fields: PendingChangeCoding.fields(try r.text(3)),
            claim: try r.optionalText(4).map { ChangeApplier.Hold(deviceID: $0, until: try r.int64(5)) }, fromSyncListID: from)
    }
}

extension ChangeApplier.ListRules {
    /// The columns `init(stored:)` reads, from `sync_lists`.
    package static var columns: String { "created_at, settings" }

    package init(stored r: some StoredRow) throws {
        self.init(settings: SyncSettings(stored: try r.optionalText(1)), pairedAt: try r.optionalText(0).flatMap(Timestamp.date))
    }
}

extension UnknownStoredValue {
    /// A stored value of a shape the store never writes (a NULL where text must be, a row of the wrong width).
    package static func unexpected(_ type: String, _ value: String) -> Self { Self(type: type, value: value) }
}

extension SyncTaskRecord {
    /// The columns `init(stored:)` reads, from `sync_tasks`.
    package static let columns = "sync_list_id, trello_card_id, reminder_id, deleted, field_hashes, last_synced_at"

    package init(stored r: some StoredRow) throws {
        self.init(
            syncListID: try r.text(0), cardID: try r.text(1), reminderID: try r.optionalText(2), deleted: try r.bool(3),
            stamps: FieldStamps.decodeStamps(try r.text(4)), lastSyncedAt: try r.optionalText(5))
    }
}

public import Foundation
public import RoundupCore

/// An account's whole data as one JSON document (`GET /dailyroundup/account/export`, `roundupctl accounts export`):
/// the account with its credentials masked, its lists with their settings, devices (APNs tokens masked), card ↔
/// reminder mappings, pending changes, conflicts, possible duplicates and the activity history. Written section by
/// section and the long ones page by page, so memory stays flat however big the account; each page is its own read,
/// so a change made during the export may show in one section and not yet in another.
public struct AccountExport: Sendable {
    public static let format = "roundup-export/1"
    public typealias Store = SyncStore & SyncJobStore & ActivityRepository

    package let store: any Store
    package let pageSize: Int

    public init(store: any Store, pageSize: Int = 500) {
        self.store = store
        self.pageSize = pageSize
    }

    /// Writes the document to `sink` in pieces; false (nothing written) when the account does not exist.
    public func write(accountID: String, now: Date = Date(), to sink: (String) async throws -> Void) async throws -> Bool {
        guard let account = try await store.accountDetails(id: accountID) else { return false }
        try await sink(#"{"format":"# + JSONValue.string(Self.format).canonicalJSON)
        try await sink(#","exported_at":"# + JSONValue.string(Timestamp.string(now)).canonicalJSON)
        try await sink(#","account":"# + Self.json(account).canonicalJSON)
        try await sink(#","lists":"# + JSONValue.array(try await store.syncLists(accountID: accountID).map(Self.json)).canonicalJSON)
        try await sink(#","devices":"# + JSONValue.array(try await store.devices(accountID: accountID).map(Self.json)).canonicalJSON)

        try await section("mappings", sink) { after in
            let rows = try await store.mappings(accountID: accountID, afterID: after ?? 0, limit: pageSize)
            return (rows.map(Self.json), rows.last?.id)
        }
        try await section("pending_changes", sink) { after in
            let rows = try await store.pendingChanges(accountID: accountID, afterID: after ?? 0, limit: pageSize)
            return (rows.map(Self.json), rows.last?.id)
        }
        try await sink(#","conflicts":"# + JSONValue.array(try await store.conflicts(accountID: accountID).map(Self.json)).canonicalJSON)
        try await sink(#","duplicates":"# + JSONValue.array(try await store.duplicates(accountID: accountID).map(Self.json)).canonicalJSON)
        // Newest first, as the API pages it.
        try await section("activity", sink) { before in
            let rows = try await store.activity(accountID: accountID, ActivityQuery(beforeID: before, limit: pageSize))
            return (rows.map(\.json), rows.last?.id)
        }
        try await sink("}")
        return true
    }

    /// `,"name":[…]` from pages: `next` takes the previous page's cursor (nil first) and gives rows and the next cursor.
    private func section(
        _ name: String, _ sink: (String) async throws -> Void, next: (Int64?) async throws -> (rows: [JSONValue], cursor: Int64?)
    ) async throws {
        try await sink(",\(JSONValue.string(name).canonicalJSON):[")
        var cursor: Int64?
        var first = true
        while true {
            let page = try await next(cursor)
            // Row by row: the sink decides how much it holds before writing.
            for row in page.rows {
                try await sink((first ? "" : ",") + row.canonicalJSON)
                first = false
            }
            guard page.rows.count >= pageSize, let more = page.cursor else { break }
            cursor = more
        }
        try await sink("]")
    }

    package static func text(_ value: String?) -> JSONValue { value.map(JSONValue.string) ?? .null }
    /// Stored canonical JSON as a value (null when absent or unreadable).
    package static func parsed(_ text: String?) -> JSONValue { text.flatMap { try? JSONParser.parse(Array($0.utf8)) } ?? .null }

    package static func json(_ a: AccountDetails) -> JSONValue {
        .object([
            "account_id": .string(a.id), "trello_api_key": text(maskSecret(a.trelloAPIKey)), "trello_token": text(maskSecret(a.trelloToken)),
            "trello_webhook_secret": text(maskSecret(a.trelloWebhookSecret)), "conflict_policy": .string(a.conflictPolicy.rawValue),
            "delete_mode": .string(a.deleteMode.rawValue), "needs_attention": text(a.needsAttention?.rawValue), "created_at": .string(a.createdAt),
            "updated_at": .string(a.updatedAt),
        ])
    }

    package static func json(_ l: SyncListRecord) -> JSONValue {
        .object([
            "sync_list_id": .string(l.id), "name": .string(l.name), "trello_board_id": .string(l.trelloBoardID),
            "trello_list_id": .string(l.trelloListID), "settings": l.settings.json, "created_at": text(l.createdAt),
            "last_reconciled_at": text(l.lastReconciledAt), "last_reconcile_error": text(l.lastReconcileError),
        ])
    }

    package static func json(_ d: DeviceRecord) -> JSONValue {
        .object([
            "device_id": .string(d.deviceID), "platform": .string(d.platform.rawValue), "environment": .string(d.environment.rawValue),
            "apns_token": text(maskSecret(d.apnsToken)), "bundle_id": text(d.bundleID?.rawValue), "created_at": .string(d.createdAt),
            "updated_at": .string(d.updatedAt),
        ])
    }

    package static func json(_ m: MappingRecord) -> JSONValue {
        .object([
            "sync_list_id": .string(m.syncListID), "trello_card_id": .string(m.cardID), "reminder_id": text(m.reminderID),
            "deleted": .bool(m.deleted), "last_synced_at": text(m.lastSyncedAt), "created_at": .string(m.createdAt),
            "updated_at": .string(m.updatedAt),
        ])
    }

    package static func json(_ c: PendingChange) -> JSONValue {
        .object([
            "id": .number(Double(c.id)), "change_type": .string(c.changeType.rawValue), "sync_list_id": .string(c.syncListID),
            "trello_card_id": .string(c.trelloCardID), "reminder_id": text(c.reminderID), "changed_fields": parsed(c.changedFieldsJSON),
            "fields": parsed(c.fieldsJSON), "trello_action_id": text(c.trelloActionID), "created_at": .string(c.createdAt),
        ])
    }

    package static func json(_ c: ConflictRecord) -> JSONValue {
        .object([
            "id": .number(Double(c.id)), "sync_list_id": text(c.syncListID), "trello_card_id": text(c.trelloCardID),
            "reminder_id": text(c.reminderID), "field": .string(c.field), "trello_value": parsed(c.trelloValue),
            "reminders_value": parsed(c.remindersValue), "status": .string(c.status.rawValue), "created_at": .string(c.createdAt),
        ])
    }

    package static func json(_ d: DuplicateRecord) -> JSONValue {
        .object([
            "id": .number(Double(d.id)), "sync_list_id": .string(d.syncListID), "reminder_id": text(d.reminderID),
            "trello_card_id": .string(d.trelloCardID), "title": .string(d.title), "due_date": text(d.dueDate),
            "status": .string(d.status.rawValue), "created_at": .string(d.createdAt),
        ])
    }
}

extension ActivityRecord {
    /// The row as `GET /dailyroundup/activity` and the export show it (docs/openapi.yaml `Activity`).
    public var json: JSONValue {
        typealias E = AccountExport
        return .object([
            "id": .number(Double(id)), "kind": .string(kind.rawValue), "sync_list_id": E.text(syncListID), "trello_card_id": E.text(cardID),
            "reminder_id": E.text(reminderID), "side": E.text(side?.rawValue), "field": E.text(field), "old_value": E.parsed(oldValueJSON),
            "new_value": E.parsed(newValueJSON), "rule": E.text(rule?.rawValue), "kept": E.text(kept?.rawValue), "message": E.text(message),
            "job_id": E.text(jobID), "trello_action_id": E.text(trelloActionID), "created_at": .string(createdAt),
        ])
    }
}

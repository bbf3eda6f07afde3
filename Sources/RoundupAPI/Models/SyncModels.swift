import Foundation
import Metrics
public import RoundupCore
import RoundupJobs
import RoundupStore

// The body of `POST /dailyroundup/sync` (docs/openapi.yaml: SyncRequest, SyncChange).

/// The apps' edits to send to Trello.
public struct SyncRequest: Codable, Sendable, Equatable {
    public var deviceID: String
    public var changes: [SyncChange]

    enum CodingKeys: String, CodingKey, CaseIterable {
        case deviceID = "device_id"
        case changes
    }

    static let maxChanges = 500

    /// The envelope checked; each change is checked by `SyncChange.init(_:path:lists:)` in turn.
    static func envelope(_ body: JSONBody) throws -> (deviceID: String, changes: [JSONValue]) {
        try body.allowOnly(Set(CodingKeys.allCases.map(\.rawValue)))
        let deviceID = try body.requiredString(CodingKeys.deviceID.rawValue, maxLength: 200)
        guard let changesValue = body.object[CodingKeys.changes.rawValue] else { throw APIError.unprocessable("changes is required") }
        guard case .array(let changes) = changesValue else { throw APIError.badRequest("changes must be an array") }
        guard !changes.isEmpty else { throw APIError.unprocessable("changes must not be empty") }
        guard changes.count <= maxChanges else {
            throw APIError.unprocessable("at most \(maxChanges) changes per request; split them over several syncs")
        }
        return (deviceID, changes)
    }
}

/// One edit of a reminder, for its card.
public struct SyncChange: Codable, Sendable, Equatable {
    public var op: SyncOp
    public var syncListID: String
    public var reminderID: String
    public var trelloCardID: String?
    /// Field values keyed by field name, normalized (`SyncFields`).
    public var fields: [String: JSONValue]
    public var changedFields: [String]
    public var modifiedAt: String

    enum CodingKeys: String, CodingKey, CaseIterable {
        case op
        case syncListID = "sync_list_id"
        case reminderID = "reminder_id"
        case trelloCardID = "trello_card_id"
        case fields
        case changedFields = "changed_fields"
        case modifiedAt = "modified_at"
    }

    /// The most bytes of UTF-8 a `reminder_id` holds, here and in acks (`ChangeAckBody`, `ChangeAckBatch`): it is stored
    /// and indexed with the account (PostgreSQL's index entries hold at most about 2.7 KB), whatever its characters.
    static let reminderIDMaxBytes = 1_024

    /// The change checked member by member against the account's `lists`; errors name it by `path` (`changes[3]`).
    /// Whether its card is the account's is the store's to say (`SyncRoutes.submit`).
    init(_ value: JSONValue, path: String, lists: Set<String>) throws {
        guard case .object(let object) = value else { throw APIError.badRequest("\(path) must be an object") }
        let change = JSONBody(object: object)
        let allowed = Set(CodingKeys.allCases.map(\.rawValue))
        if let unknown = object.keys.sorted().first(where: { !allowed.contains($0) }) {
            throw APIError.unprocessable("\(path): unknown field \"\(unknown)\"; allowed: \(allowed.sorted().joined(separator: ", "))")
        }
        func prefixed<T>(_ body: () throws -> T) throws -> T {
            do { return try body() } catch let error as APIError {
                throw APIError(error.status, error.code, "\(path).\(error.message)")
            }
        }
        op = try prefixed { try change.requiredOneOf("op", SyncOp.self) }
        syncListID = try prefixed { try change.requiredString("sync_list_id", maxLength: 100) }
        guard lists.contains(syncListID) else { throw APIError.unprocessable("\(path).sync_list_id: no list \(syncListID) in this account") }
        reminderID = try prefixed { try change.requiredString("reminder_id", maxLength: 200, maxBytes: Self.reminderIDMaxBytes) }
        trelloCardID = try prefixed { try change.string("trello_card_id", required: false, maxLength: 100) }
        modifiedAt = try prefixed { try change.requiredString("modified_at", maxLength: 64) }
        guard Timestamp.date(modifiedAt) != nil else {
            throw APIError.unprocessable("\(path).modified_at must be an ISO 8601 date-time such as 2026-11-23T09:00:00Z")
        }
        // What the app sends back may hold every field of the change it received, read-only ones and values it did not
        // touch included: an update reads only the fields `changed_fields` names; a create, every writable field given.
        // A name that is no field at all (`dueDate`, `colour`) is a mistake, refused.
        var given: [String: JSONValue] = [:]
        if let raw = object["fields"], raw != .null {
            guard case .object(let object) = raw else { throw APIError.badRequest("\(path).fields must be an object") }
            if let unknown = object.keys.sorted().first(where: { SyncField(rawValue: $0) == nil }) {
                throw APIError.unprocessable(
                    "\(path).fields.\(unknown): unknown field; the apps write \(SyncFields.writableNames) (the others of a change are read-only)"
                )
            }
            given = object
        }
        var changed: [String] = []
        if let raw = object["changed_fields"], raw != .null {
            guard case .array(let names) = raw else { throw APIError.badRequest("\(path).changed_fields must be an array of field names") }
            for name in names {
                guard case .string(let field) = name else { throw APIError.badRequest("\(path).changed_fields must be an array of field names") }
                guard let known = SyncField(rawValue: field), SyncFields.writable.contains(known) else {
                    throw APIError.unprocessable("\(path).changed_fields: unknown field \"\(field)\"; allowed: \(SyncFields.writableNames)")
                }
                if given[field] == nil {
                    // A generated client leaves nil out: a field that can be null, named but absent, is null (cleared).
                    guard SyncFields.nullable.contains(known) else {
                        throw APIError.unprocessable(
                            "\(path).changed_fields names \(field), which is not in fields (only a field that can be null may be left out, meaning null)"
                        )
                    }
                    given[field] = .null
                }
                if !changed.contains(field) { changed.append(field) }
            }
        }
        switch op {
        case .create:
            guard given[SyncField.title] != nil else { throw APIError.unprocessable("\(path).fields.title is required for a create") }
            // Every writable field given is written; `changed_fields` matters again only if the create finds its card made.
            for field in given.keys.sorted() where SyncField(rawValue: field).map(SyncFields.writable.contains) == true && !changed.contains(field) {
                changed.append(field)
            }
        case .update:
            guard !changed.isEmpty else { throw APIError.unprocessable("\(path).changed_fields must name at least one field for an update") }
        case .complete, .delete, .move:
            break
        }
        // A wrong JSON type refuses the request; a value that cannot be written fails only this item, in the job (its
        // result is `error`, naming the field), so it is kept as sent.
        var fields: [String: JSONValue] = [:]
        for name in changed {
            guard let value = given[name] else { continue }
            do {
                try SyncFields.checkType(named: name, value, path: "\(path).fields.\(name)")
            } catch let error as SyncFields.Invalid {
                throw APIError.unprocessable(error.description)
            }
            fields[name] = (try? SyncFields.normalize(named: name, value, path: "fields.\(name)")) ?? value
        }
        self.fields = fields
        changedFields = changed
    }

    /// The job's item for this change.
    /// The job's item for this change, received at `received`: a `modified_at` later than that (a device clock running
    /// ahead) is taken as `received`, so under `lww` a fast clock cannot win a conflict it did not win.
    func item(received: Date) -> SyncItem {
        var modified = Timestamp.date(modifiedAt) ?? received
        if modified > received {
            Counter(label: "roundup_sync_modified_at_clamped_total").increment()
            modified = received
        }
        return SyncItem(
            op: op, syncListID: syncListID, reminderID: reminderID, trelloCardID: trelloCardID, fields: fields, changedFields: changedFields,
            modifiedAt: modified)
    }
}

import Foundation
import Hummingbird
import Logging
import RoundupCore
import RoundupStore

extension API {
    static func deviceJSON(_ d: DeviceRecord) -> JSONValue {
        .object([
            "device_id": .string(d.deviceID), "platform": .string(d.platform), "environment": .string(d.environment),
            "apns_token": maskSecret(d.apnsToken).json, "created_at": .string(d.createdAt), "updated_at": .string(d.updatedAt),
        ])
    }

    func listDevices(_ account: String) async throws -> Response {
        let devices = try await store.devices(accountID: account)
        return jsonResponse(.ok, .object(["devices": .array(devices.map(Self.deviceJSON))]))
    }

    func registerDevice(_ account: String, _ request: Request, _ context: APIRequestContext) async throws -> Response {
        let body = try await JSONBody.read(request, context: context)
        try body.allowOnly(["device_id", "apns_token", "platform", "environment"])
        let deviceID = try body.requiredString("device_id", maxLength: 200)
        let token = try body.requiredString("apns_token", maxLength: 400).lowercased()
        guard token.count >= 32, token.count % 2 == 0, token.allSatisfy(\.isHexDigit) else {
            throw APIError.unprocessable("apns_token must be the device token in hex")
        }
        let platform = try body.requiredOneOf("platform", ["ios", "macos"])
        let environment = try body.requiredOneOf("environment", ["production", "sandbox"])
        let (device, created) = try await store.upsertDevice(accountID: account, deviceID: deviceID, apnsToken: token, platform: platform, environment: environment)
        return jsonResponse(created ? .created : .ok, Self.deviceJSON(device))
    }

    func deleteDevice(_ account: String, _ deviceID: String) async throws -> Response {
        guard try await store.deleteDevice(accountID: account, deviceID: deviceID) else { throw APIError.notFound("no device \(deviceID)") }
        return Response(status: .noContent)
    }

    static func conflictJSON(_ c: ConflictRecord, resolution: String? = nil, resolvedAt: String? = nil) -> JSONValue {
        .object([
            "id": .number(Double(c.id)), "sync_list_id": c.syncListID.json, "trello_card_id": c.trelloCardID.json,
            "reminder_id": c.reminderID.json, "field": .string(c.field),
            "trello_value": c.trelloValue.flatMap { try? JSONParser.parse(Array($0.utf8)) } ?? .null,
            "reminders_value": c.remindersValue.flatMap { try? JSONParser.parse(Array($0.utf8)) } ?? .null,
            "status": .string(c.status), "created_at": .string(c.createdAt), "resolution": resolution.json, "resolved_at": resolvedAt.json,
        ])
    }

    func listConflicts(_ account: String) async throws -> Response {
        let rows = try await store.conflicts(accountID: account)
        return jsonResponse(.ok, .object(["conflicts": .array(rows.map { Self.conflictJSON($0) })]))
    }

    static func duplicateJSON(_ d: DuplicateRecord) -> JSONValue {
        .object([
            "id": .number(Double(d.id)), "sync_list_id": .string(d.syncListID), "reminder_id": d.reminderID.json,
            "trello_card_id": .string(d.trelloCardID), "title": .string(d.title), "due_date": d.dueDate.json,
            "status": .string(d.status), "created_at": .string(d.createdAt),
        ])
    }

    func listDuplicates(_ account: String) async throws -> Response {
        let rows = try await store.duplicates(accountID: account)
        return jsonResponse(.ok, .object(["duplicates": .array(rows.map(Self.duplicateJSON))]))
    }
}

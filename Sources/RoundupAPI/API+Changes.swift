import Foundation
import Hummingbird
import NIOCore
import Logging
import RoundupCore
import RoundupStore

extension API {
    func listChanges(_ account: String, _ request: Request) async throws -> Response {
        let query = request.uri.queryParameters
        var afterID: Int64 = 0
        var limit = 200
        if let text = query["after_id"] {
            guard let value = Int64(String(text)) else { throw APIError.badRequest("after_id must be an integer") }
            guard value >= 0 else { throw APIError.unprocessable("after_id must not be negative") }
            afterID = value
        }
        if let text = query["limit"] {
            guard let value = Int(String(text)) else { throw APIError.badRequest("limit must be an integer") }
            guard (1...500).contains(value) else { throw APIError.unprocessable("limit must be between 1 and 500") }
            limit = value
        }
        let rows = try await store.pendingChangesText(accountID: account, afterID: afterID, limit: limit + 1)
        // The stored JSON columns are canonical JSON already: spliced in as they are, not parsed and re-encoded.
        var out = ByteBuffer()
        out.reserveCapacity(256 + rows.count * 400)
        out.writeString(#"{"changes":["#)
        for (index, row) in rows.prefix(limit).enumerated() {
            if index > 0 { out.writeString(",") }
            out.writeString(#"{"id":"#)
            out.writeString(String(row.id))
            out.writeString(#","change_type":"#)
            out.writeString(JSONValue.string(row.changeType).canonicalJSON)
            out.writeString(#","sync_list_id":"#)
            out.writeString(JSONValue.string(row.syncListID).canonicalJSON)
            out.writeString(#","trello_card_id":"#)
            out.writeString(JSONValue.string(row.trelloCardID).canonicalJSON)
            out.writeString(#","reminder_id":"#)
            out.writeString(row.reminderID.json.canonicalJSON)
            out.writeString(#","changed_fields":"#)
            out.writeString(row.changedFieldsJSON)
            out.writeString(#","fields":"#)
            out.writeString(row.fieldsJSON)
            out.writeString(#","created_at":"#)
            out.writeString(JSONValue.string(row.createdAt).canonicalJSON)
            out.writeString("}")
        }
        out.writeString(#"],"has_more":"#)
        out.writeString(rows.count > limit ? "true" : "false")
        out.writeString(#","server_time":"#)
        out.writeString(JSONValue.string(Timestamp.now()).canonicalJSON)
        out.writeString("}")
        return Response(status: .ok, headers: [.contentType: "application/json"], body: ResponseBody(byteBuffer: out))
    }

    func ackOne(_ account: String, _ idText: String, _ request: Request, _ context: APIRequestContext) async throws -> Response {
        guard let id = Int64(idText) else { throw APIError.badRequest("the change id must be an integer") }
        let body = try await JSONBody.read(request, context: context, optional: true)
        try body.allowOnly(["reminder_id"])
        let reminder = try body.string("reminder_id", required: false, maxLength: 500)
        return try await acknowledge(account, [ChangeAck(id: id, reminderID: reminder)])
    }

    func ackMany(_ account: String, _ request: Request, _ context: APIRequestContext) async throws -> Response {
        let body = try await JSONBody.read(request, context: context)
        try body.allowOnly(["acks", "ids"])
        var acks: [ChangeAck] = []
        if let list = body.object["acks"] {
            guard case .array(let items) = list else { throw APIError.badRequest("acks must be an array") }
            for (index, item) in items.enumerated() {
                guard case .object(let object) = item, let idValue = object["id"] else {
                    throw APIError.badRequest("acks[\(index)] must be an object with an id")
                }
                let id = try JSONBody.integer(idValue, name: "acks[\(index)].id")
                var reminder: String?
                if let value = object["reminder_id"], value != .null {
                    guard case .string(let text) = value, !text.isEmpty else { throw APIError.badRequest("acks[\(index)].reminder_id must be a string") }
                    reminder = text
                }
                acks.append(ChangeAck(id: id, reminderID: reminder))
            }
        } else if let list = body.object["ids"] {
            guard case .array(let items) = list else { throw APIError.badRequest("ids must be an array") }
            acks = try items.enumerated().map { ChangeAck(id: try JSONBody.integer($1, name: "ids[\($0)]")) }
        } else {
            throw APIError.unprocessable("send {\"acks\": [{\"id\", \"reminder_id\"}]} or {\"ids\": [...]}")
        }
        guard !acks.isEmpty else { throw APIError.unprocessable("nothing to ack") }
        guard acks.count <= 500 else { throw APIError.unprocessable("at most 500 acks per request") }
        return try await acknowledge(account, acks)
    }

    private func acknowledge(_ account: String, _ acks: [ChangeAck]) async throws -> Response {
        switch try await store.acknowledge(accountID: account, acks: acks) {
        case .acked(let ids): return jsonResponse(.ok, .object(["acked": .array(ids.map { .number(Double($0)) })]))
        case .notFound(let id): throw APIError.notFound("no change \(id) (nothing was acked)")
        }
    }
}

import Hummingbird
import NIOCore
import RoundupCore
import RoundupStore

/// `/dailyroundup/changes`: the pending changes the apps pull, and their acknowledgement.
struct ChangeRoutes {
    let api: API

    var collection: RouteCollection<APIRequestContext> {
        let routes = RouteCollection(context: APIRequestContext.self)
        routes.add(middleware: api.authentication)
        routes.get { request, context in try await page(context.requireAccount(), request) }
        routes.get("stream") { request, context in try await stream(context.requireAccount(), request) }
        routes.post("{id}/ack") { request, context in try await ackOne(context.requireAccount(), context.parameters.require("id"), request, context) }
        routes.post("ack") { request, context in try await ackMany(context.requireAccount(), request, context) }
        return routes
    }

    /// `GET /dailyroundup/changes`: a page of `ChangePage`. The hottest read of the API: the stored JSON columns are
    /// canonical JSON already, so they are spliced in as they are, not parsed and re-encoded.
    func page(_ account: String, _ request: Request) async throws -> Response {
        let query = request.uri.queryParameters
        let afterID = try Self.afterID(query["after_id"].map(String.init)) ?? 0
        var limit = 200
        if let text = query["limit"] {
            guard let value = Int(String(text)) else { throw APIError.badRequest("limit must be an integer") }
            guard (1...500).contains(value) else { throw APIError.unprocessable("limit must be between 1 and 500") }
            limit = value
        }
        let rows = try await api.store.pendingChanges(accountID: account, afterID: afterID, limit: limit + 1)
        var out = ByteBuffer()
        // Room for the whole page at once: each change is written into the most it can take, so the buffer never grows
        // midway (the bounds' unused tail is reserved, not touched).
        out.reserveCapacity(256 + rows.prefix(limit).reduce(0) { $0 + Self.bound($1) })
        out.writeString(#"{"changes":["#)
        for (index, row) in rows.prefix(limit).enumerated() {
            if index > 0 { out.writeString(",") }
            Self.write(row, to: &out)
        }
        out.writeString(#"],"has_more":"#)
        out.writeString(rows.count > limit ? "true" : "false")
        out.writeString(#","server_time":"#)
        out.writeJSONString(Timestamp.now())
        out.writeString("}")
        return Response(status: .ok, headers: [.contentType: "application/json"], body: ResponseBody(byteBuffer: out))
    }

    /// `after_id` of a query: nil when absent.
    static func afterID(_ text: String?) throws -> Int64? {
        guard let text else { return nil }
        guard let value = Int64(text) else { throw APIError.badRequest("after_id must be an integer") }
        guard value >= 0 else { throw APIError.unprocessable("after_id must not be negative") }
        return value
    }

    /// One change as `Change` of docs/openapi.yaml: the same JSON on the page and on the stream. Written in one
    /// reservation of the most it can take (`JSONByteWriter`).
    static func write(_ row: PendingChange, to out: inout ByteBuffer) {
        out.writeJSON(bound: bound(row)) { w in
            w.write(#"{"id":"#)
            w.writeDecimal(row.id)
            w.write(#","change_type":"#)
            w.writeJSONString(row.changeType.rawValue)
            w.write(#","sync_list_id":"#)
            w.writeJSONString(row.syncListID)
            w.write(#","trello_card_id":"#)
            w.writeJSONString(row.trelloCardID)
            w.write(#","reminder_id":"#)
            if let reminderID = row.reminderID { w.writeJSONString(reminderID) } else { w.write("null") }
            w.write(#","changed_fields":"#)
            w.writeRaw(row.changedFieldsJSON)
            w.write(#","fields":"#)
            w.writeRaw(row.fieldsJSON)
            w.write(#","created_at":"#)
            w.writeJSONString(row.createdAt)
            w.write("}")
        }
    }

    /// The most bytes `write` takes for `row` (its strings as if every byte were escaped).
    static func bound(_ row: PendingChange) -> Int {
        typealias W = JSONByteWriter
        // 160: the object's keys and punctuation (113 bytes) with room to spare.
        return 160 + W.decimalBound + W.jsonStringBound(row.changeType.rawValue) + W.jsonStringBound(row.syncListID)
            + W.jsonStringBound(row.trelloCardID) + (row.reminderID.map(W.jsonStringBound) ?? 4) + row.changedFieldsJSON.utf8.count
            + row.fieldsJSON.utf8.count + W.jsonStringBound(row.createdAt)
    }

    func ackOne(_ account: String, _ idText: String, _ request: Request, _ context: APIRequestContext) async throws -> AckedChanges {
        guard let id = Int64(idText) else { throw APIError.badRequest("the change id must be an integer") }
        let body = try ChangeAckBody(try await JSONBody.read(request, context: context, optional: true))
        return try await acknowledge(account, [ChangeAck(id: id, reminderID: body.reminderID)])
    }

    func ackMany(_ account: String, _ request: Request, _ context: APIRequestContext) async throws -> AckedChanges {
        let batch = try ChangeAckBatch(try await JSONBody.read(request, context: context))
        return try await acknowledge(account, batch.acknowledgements)
    }

    private func acknowledge(_ account: String, _ acks: [ChangeAck]) async throws -> AckedChanges {
        switch try await api.store.acknowledge(accountID: account, acks: acks) {
        case .acked(let ids): return AckedChanges(acked: ids)
        case .notFound(let id): throw APIError.notFound("no change \(id) (nothing was acked)")
        }
    }
}

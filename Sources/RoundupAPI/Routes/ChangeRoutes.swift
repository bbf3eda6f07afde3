import Foundation
import Hummingbird
import Logging
import NIOCore
import RoundupCore
import RoundupJobs
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams

/// `/dailyroundup/changes`: the pending changes the apps pull, and their acknowledgement.
struct ChangeRoutes {
    let store: any ChangeFeed & DeviceRepository & AccountRepository
    /// The open change streams, woken by new changes and revocations; a stream checks its token again as it runs.
    let signals: AccountSignals
    /// How long the changes a device pulls are its own (`ROUNDUP_CHANGE_CLAIM_SECONDS`).
    let claimFor: TimeInterval
    let logger: Logger

    var collection: RouteCollection<AuthenticatedContext> {
        let routes = RouteCollection(context: AuthenticatedContext.self)
        routes.get { request, context in try await page(context.account, request) }
        routes.get("stream") { request, context in try await stream(context.account, request, context) }
        routes.post("{id}/ack") { request, context in try await ackOne(context.account, context.parameters.require("id"), request, context) }
        routes.post("ack") { request, context in try await ackMany(context.account, request, context) }
        routes.post("release") { request, context in try await release(context.account, request, context) }
        return routes
    }

    /// `GET /dailyroundup/changes`: a page of `ChangePage`. The hottest read of the API: the stored JSON columns are
    /// canonical JSON already, so they are spliced in as they are, not parsed and re-encoded.
    func page(_ account: String, _ request: Request) async throws -> Response {
        let query = request.uri.queryParameters
        let afterID = try Self.afterID(query["after_id"].map(String.init)) ?? 0
        let limit = try pageLimit(query["limit"], standard: 200, most: 500)
        // One change more than the page holds tells whether there are more.
        var page: ChangePage
        if let device = try Self.deviceID(query["device_id"].map(String.init)) {
            // The page's changes become the device's for `claimFor`; the one more is read, not held.
            let claim = ChangeClaim(deviceID: device, holdFor: claimFor)
            guard
                var claimed = try await store.claimChanges(
                    accountID: account, claim: claim, afterID: afterID, limit: limit + 1, into: ChangePage(limit: limit))
            else { throw Self.unknownDevice }
            claimed.claimedUntil = Timestamp.string(claim.untilDate)
            page = claimed
        } else {
            page = try await store.pendingChanges(accountID: account, afterID: afterID, limit: limit + 1, into: ChangePage(limit: limit))
        }
        let body = page.finish()
        return Response(
            status: .ok, headers: [.contentType: "application/json"],
            body: body.readableBytes > ResponsePieces.wholeUpTo
                ? ResponseBody(contentsOf: ResponsePieces.split(body)) : ResponseBody(byteBuffer: body))
    }

    /// A page of changes, written as the store reads them: the first `limit` into `out`, and whether one more came.
    /// A page ends early, with `has_more`, once it holds `maxBytes`: whatever the account's changes, a page's memory is
    /// bounded (the client asks for the rest after the last id, as for any page).
    struct ChangePage: PendingChangeSink {
        let limit: Int
        var maxBytes = ChangeRoutes.pageMaxBytes
        var count = 0
        var hasMore = false
        var lastTaken: Int64 = 0
        /// With `device_id`: the end of the device's hold, written after `server_time`.
        var claimedUntil: String?
        // Empty until the first change: the store's copy of the page is the only one that writes, so nothing is copied.
        var out = ByteBuffer()

        /// Full once it knows there is more: the store reads no further.
        var isFull: Bool { hasMore }

        mutating func take(_ change: PendingChangeCells) {
            guard count < limit, out.readableBytes < maxBytes else { return hasMore = true }
            if count == 0 {
                // Room for a typical page at once (a change of the benchmark's cards is ~420 bytes); each change then
                // reserves the most it can take (`bound`), so the buffer grows only for larger ones.
                out.reserveCapacity(64 + limit * 512)
                out.writeString(#"{"changes":["#)
            } else {
                out.writeString(",")
            }
            ChangeRoutes.write(change, to: &out)
            count += 1
            lastTaken = change.id
        }

        /// The whole `ChangePage` body.
        mutating func finish() -> ByteBuffer {
            if count == 0 { out.writeString(#"{"changes":["#) }
            out.writeString(#"],"has_more":"#)
            out.writeString(hasMore ? "true" : "false")
            out.writeString(#","server_time":"#)
            out.writeJSONString(Timestamp.now())
            if let claimedUntil {
                out.writeString(#","claimed_until":"#)
                out.writeJSONString(claimedUntil)
            }
            out.writeString("}")
            return out
        }
    }

    /// The size past which a page takes no more changes (1 MiB).
    static let pageMaxBytes = 1 << 20

    /// `device_id` of a query: nil when absent (a pull that sees every change and holds none).
    static func deviceID(_ text: String?) throws -> String? {
        guard let text else { return nil }
        guard !text.isEmpty, text.count <= 200, text.utf8.count <= 800 else {
            throw APIError.unprocessable("device_id must be the id of a registered device (1 to 200 characters)")
        }
        return text
    }

    static let unknownDevice = APIError.unprocessable(
        "device_id is not a device of this account (register it with POST /dailyroundup/devices)")

    /// `after_id` of a query: nil when absent.
    static func afterID(_ text: String?) throws -> Int64? {
        guard let text else { return nil }
        guard let value = Int64(text) else { throw APIError.badRequest("after_id must be an integer") }
        guard value >= 0 else { throw APIError.unprocessable("after_id must not be negative") }
        return value
    }

    /// One change as `Change` of docs/openapi.yaml, from its stored bytes: the same JSON on the page and on the stream.
    /// Written in one reservation of the most it can take (`JSONByteWriter`).
    static func write(_ change: PendingChangeCells, to out: inout ByteBuffer) {
        out.writeJSON(bound: bound(change)) { w in
            w.write(#"{"id":"#)
            w.writeDecimal(change.id)
            w.write(#","change_type":"#)
            w.writeJSONString(change.changeType.rawValue)
            w.write(#","sync_list_id":"#)
            w.writeJSONString(change.syncListID)
            if let from = change.fromSyncListID {
                // A move only: the list the card left.
                w.write(#","from_sync_list_id":"#)
                w.writeJSONString(from)
            }
            w.write(#","trello_card_id":"#)
            w.writeJSONString(change.trelloCardID)
            w.write(#","reminder_id":"#)
            if let reminderID = change.reminderID { w.writeJSONString(reminderID) } else { w.write("null") }
            w.write(#","changed_fields":"#)
            w.writeRaw(change.changedFieldsJSON)
            w.write(#","fields":"#)
            w.writeRaw(change.fieldsJSON)
            w.write(#","created_at":"#)
            w.writeJSONString(change.createdAt)
            w.write("}")
        }
    }

    /// The most bytes `write` takes for `change` (its strings as if every byte were escaped, its JSON columns as if
    /// every byte were replaced).
    static func bound(_ change: PendingChangeCells) -> Int {
        typealias W = JSONByteWriter
        // 160: the object's keys and punctuation (113 bytes) with room to spare.
        return 160 + W.decimalBound + W.jsonStringBound(change.changeType.rawValue) + W.jsonStringBound(change.syncListID)
            + W.jsonStringBound(change.trelloCardID) + (change.reminderID.map(W.jsonStringBound) ?? 4) + W.rawBound(change.changedFieldsJSON)
            + W.rawBound(change.fieldsJSON) + W.jsonStringBound(change.createdAt) + (change.fromSyncListID.map { 24 + W.jsonStringBound($0) } ?? 0)
    }

    func ackOne(_ account: String, _ idText: String, _ request: Request, _ context: AuthenticatedContext) async throws -> AckedChanges {
        guard let id = Int64(idText) else { throw APIError.badRequest("the change id must be an integer") }
        let body = try ChangeAckBody(try await JSONBody.read(request, context: context, optional: true))
        return try await acknowledge(account, [ChangeAck(id: id, reminderID: body.reminderID)])
    }

    func ackMany(_ account: String, _ request: Request, _ context: AuthenticatedContext) async throws -> AckedChanges {
        let batch = try ChangeAckBatch(try await JSONBody.read(request, context: context))
        return try await acknowledge(account, batch.acknowledgements)
    }

    func release(_ account: String, _ request: Request, _ context: AuthenticatedContext) async throws -> ReleasedChanges {
        let body = try ChangeReleaseBody(try await JSONBody.read(request, context: context))
        guard try await store.devices(accountID: account).contains(where: { $0.deviceID == body.deviceID }) else { throw Self.unknownDevice }
        // Not given back to this device before a hold would have lapsed: the others take them meanwhile.
        let released = try await store.releaseClaims(
            accountID: account, deviceID: body.deviceID, ids: body.ids, declinedUntil: ChangeClaim(deviceID: body.deviceID, holdFor: claimFor).until)
        if released > 0 {
            // The other devices learn at once that there is something for them: a push, and their open streams woken
            // (a stream looks below its place at its next heartbeat).
            signals.streams.wake(account: account)
            _ = try? await signals.redis.pipeline(
                NewChanges.commands(account: account, reason: .changes, excludeDevice: body.deviceID, keys: signals.keys), timeout: .seconds(2))
        }
        return ReleasedChanges(released: released)
    }

    private func acknowledge(_ account: String, _ acks: [ChangeAck]) async throws -> AckedChanges {
        switch try await store.acknowledge(accountID: account, acks: acks) {
        case .acked(let ids): return AckedChanges(acked: ids)
        case .notFound(let id): throw APIError.notFound("no change \(id) (nothing was acked)")
        }
    }
}

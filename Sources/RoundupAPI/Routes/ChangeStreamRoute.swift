import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Metrics
import NIOCore
import RoundupCore
import RoundupRedis
import RoundupStore
import RoundupSync

/// `GET /dailyroundup/changes/stream`: the pending changes as Server-Sent Events. It first sends every pending change
/// after the client's position (`Last-Event-ID`, or `after_id`), then each new one as the store gets it; each
/// event's `id:` is the change id, so a client that reconnects with the last id it saw misses nothing and sees
/// nothing twice. A superseded change is followed by its replacement (a new id). Comments (`: heartbeat`) keep
/// proxies from closing a quiet stream.
extension ChangeRoutes {
    static let lastEventID = HTTPField.Name("Last-Event-ID")!
    /// Changes one read of the store takes at most.
    static let streamBatch = 200

    func stream(_ account: String, _ request: Request) async throws -> Response {
        let after = try Self.streamPosition(request)
        let device = try await streamingDevice(account, request)
        let subscription = try api.streams.open(account: account, device: device)
        let store = api.store
        let streams = api.streams
        let logger = api.logger
        let redis = api.redis
        let keys = api.options.keys
        Counter(label: "roundup_api_streams_opened_total").increment()
        let headers: HTTPFields = [
            .contentType: "text/event-stream", .cacheControl: "no-store", HTTPField.Name("X-Accel-Buffering")!: "no",
        ]
        return Response(
            status: .ok, headers: headers,
            body: ResponseBody { writer in
                defer {
                    // The device got no background pushes while it streamed, and the last events written may never have
                    // reached it (a connection that died quietly takes them into its buffer): if changes still wait to
                    // be acknowledged once it stops streaming, wake the account's devices once.
                    streams.close(subscription) {
                        guard (try? await store.pendingChanges(accountID: account, afterID: 0, limit: 1))?.isEmpty == false else { return }
                        _ = try? await redis.pipeline(NewChanges.commands(account: account, reason: .changes, keys: keys), timeout: .seconds(2))
                    }
                }
                do {
                    // Clients reconnect after a second when the stream ends (EventSource's `retry`).
                    try await writer.write(ByteBuffer(string: "retry: 1000\n: open\n\n"))
                    var last = after
                    var signal: ChangeStreams.Signal? = .changed
                    var signals = subscription.signals.makeAsyncIterator()
                    while let current = signal {
                        var wrote = false
                        while true {
                            let events = try await store.pendingChanges(
                                accountID: account, afterID: last, limit: Self.streamBatch, into: ChangeEvents())
                            guard events.count > 0 else { break }
                            try await writer.write(events.out)
                            last = events.last
                            Counter(label: "roundup_api_stream_events_total").increment(by: events.count)
                            wrote = true
                            if events.count < Self.streamBatch { break }
                        }
                        if current == .heartbeat && !wrote { try await writer.write(ByteBuffer(string: ": heartbeat\n\n")) }
                        signal = await signals.next()
                    }
                    // The process is stopping: the client reconnects (to another process) from its last id.
                    try await writer.finish(nil)
                } catch {
                    // The client went away, or the store failed: the client resumes from its last id either way.
                    logger.debug("change stream ended", metadata: ["account": "\(account)", "error": "\(error)"])
                    throw error
                }
            })
    }

    /// Changes as Server-Sent Events, written as the store reads them: `id:` is the change id, `data:` the change as
    /// on the page.
    struct ChangeEvents: PendingChangeSink {
        var count = 0
        var last: Int64 = 0
        // Empty until the first change: the store's copy is the only one that writes, so nothing is copied.
        var out = ByteBuffer()

        mutating func take(_ change: PendingChangeCells) {
            if count == 0 { out.reserveCapacity(ChangeRoutes.streamBatch * 540) }
            out.writeString("id: ")
            out.writeString(String(change.id))
            out.writeString("\nevent: change\ndata: ")
            ChangeRoutes.write(change, to: &out)
            out.writeString("\n\n")
            last = change.id
            count += 1
        }
    }

    /// Where the stream starts: after `Last-Event-ID` (a reconnect), else after `after_id`, else from the first
    /// pending change.
    static func streamPosition(_ request: Request) throws -> Int64 {
        if let text = request.headers[lastEventID] {
            guard let value = Int64(text.trimmingCharacters(in: .whitespaces)), value >= 0 else {
                throw APIError.badRequest("Last-Event-ID must be a change id (a non-negative integer)")
            }
            return value
        }
        return try afterID(request.uri.queryParameters["after_id"].map(String.init)) ?? 0
    }

    /// The device named by `device_id`, which must be one of the account's: while it holds the stream, it gets no
    /// background pushes.
    func streamingDevice(_ account: String, _ request: Request) async throws -> String? {
        guard let text = request.uri.queryParameters["device_id"].map(String.init) else { return nil }
        guard try await api.store.devices(accountID: account).contains(where: { $0.deviceID == text }) else {
            throw APIError.unprocessable("device_id is not a device of this account (register it with POST /dailyroundup/devices)")
        }
        return text
    }
}

import Foundation
public import Logging
import Metrics
import NIOConcurrencyHelpers
import NIOCore
public import RoundupCore
public import RoundupRedis
import RoundupRuntime
public import RoundupStore
public import RoundupStreams
public import ServiceLifecycle
import Tracing

/// One app the pusher sends for: its topic (bundle id), its team's provider token, and its own connections to each
/// APNs environment (a provider token signs for its team's apps only, so apps never share a connection).
public struct APNsApp: Sendable {
    public let topic: String
    let tokens: APNsTokenProvider
    let production: APNsClient
    let sandbox: APNsClient

    public init(topic: String, tokens: APNsTokenProvider, production: APNsClient, sandbox: APNsClient) {
        self.topic = topic
        self.tokens = tokens
        self.production = production
        self.sandbox = sandbox
    }

    func shutdown() {
        production.shutdown()
        sandbox.shutdown()
    }
}

/// The apps the pusher sends for, chosen by the bundle id a device registered with (none: the default app).
public struct APNsApps: Sendable {
    public let defaultApp: APNsApp
    let others: [BundleID: APNsApp]

    public init(defaultApp: APNsApp, others: [BundleID: APNsApp] = [:]) {
        self.defaultApp = defaultApp
        self.others = others
    }

    /// The app of a device; nil when the server has no credentials for its bundle id.
    public func app(for bundleID: BundleID?) -> APNsApp? {
        guard let bundleID, bundleID.rawValue != defaultApp.topic else { return defaultApp }
        return others[bundleID]
    }

    public func shutdown() {
        defaultApp.shutdown()
        for app in others.values { app.shutdown() }
    }
}

/// Sends one notification with the response rules APNs asks for: 200 done; 410 `Unregistered`, 400 `BadDeviceToken`
/// or `DeviceTokenNotForTopic` remove the device and never retry; 403 `ExpiredProviderToken` renews the token once and
/// retries; 429, 500, 503 and requests APNs did not process retry with backoff; 413 is dropped and logged.
public struct PushSender: Sendable {
    public enum Outcome: Sendable, Equatable {
        case sent
        case deviceRemoved(String)
        case dropped(String)
        case failed(String)
    }

    let apps: APNsApps
    let maxAttempts: Int
    let logger: Logger

    public init(apps: APNsApps, maxAttempts: Int = 5, logger: Logger) {
        self.apps = apps
        self.maxAttempts = maxAttempts
        self.logger = logger
    }

    static func count(_ status: String, _ reason: String) {
        Counter(label: "roundup_apns_sends_total", dimensions: [("status", status), ("reason", reason)]).increment()
    }

    /// Sends `request` (its topic the app's) with the app's token, on the app's connections to the environment.
    public func send(_ request: APNsRequest, app: APNsApp, sandbox useSandbox: Bool) async -> Outcome {
        let client = useSandbox ? app.sandbox : app.production
        let tokens = app.tokens
        var renewed = false
        var attempt = 0
        while true {
            attempt += 1
            let token = tokens.token()
            let started = ContinuousClock.now
            let response: APNsResponse
            do {
                response = try await client.send(request, token: token.value)
            } catch APNsError.noResponse(let why) {
                // APNs may have it. A background push again is harmless (collapse id, content-available); an alert
                // twice is two banners: not resent.
                Self.count("error", "no_response")
                guard request.pushType == .background, attempt < maxAttempts else { return .failed("no response: \(why)") }
                try? await Task.sleep(for: .milliseconds(Self.backoff(attempt)))
                continue
            } catch {
                // Not processed (refused by GOAWAY, stream or connection not opened): safe to send again.
                Self.count("error", "not_processed")
                guard attempt < maxAttempts else { return .failed("\(error)") }
                try? await Task.sleep(for: .milliseconds(Self.backoff(attempt)))
                continue
            }
            let elapsed = (ContinuousClock.now - started).components
            Metrics.Timer(label: "roundup_apns_send_duration_seconds").recordNanoseconds(
                elapsed.seconds * 1_000_000_000 + elapsed.attoseconds / 1_000_000_000)
            Self.count(String(response.status), response.reason ?? "none")
            switch (response.status, response.reason) {
            case (200, _):
                return .sent
            case (410, _), (400, "BadDeviceToken"), (400, "DeviceTokenNotForTopic"):
                return .deviceRemoved(response.reason ?? "Unregistered")
            case (403, "ExpiredProviderToken") where !renewed:
                renewed = true
                tokens.expire(token)
                continue
            case (429, _), (500, _), (503, _):
                guard attempt < maxAttempts else { return .failed("\(response.status) \(response.reason ?? "")") }
                try? await Task.sleep(for: .milliseconds(Self.backoff(attempt)))
            case (413, _):
                logger.error("push dropped: payload too large", metadata: ["bytes": "\(request.payload.readableBytes)"])
                return .dropped("PayloadTooLarge")
            default:
                logger.error("push refused", metadata: ["status": "\(response.status)", "reason": "\(response.reason ?? "")"])
                return .dropped("\(response.status) \(response.reason ?? "")")
            }
        }
    }

    static func backoff(_ attempt: Int) -> Int {
        let base = 100 * (1 << min(attempt - 1, 6))
        return base + Int.random(in: 0...base)
    }
}

/// roundup-pusher's loop on the push stream (consumer group `pushers`): each entry asks for a push to an account's
/// devices (all but the one whose sync caused it). Background pushes are coalesced per device: at most one per window,
/// the rest folded into one sent when the window ends (a deferred set in Redis, shared by every pusher process).
public struct PushConsumer: Service {
    public struct Options: Sendable {
        public var keys: RedisKeys
        public var consumer: String
        public var window: Duration
        public init(keys: RedisKeys, consumer: String, window: Duration) {
            self.keys = keys
            self.consumer = consumer
            self.window = window
        }
    }

    let options: Options
    let redis: RedisClient
    let store: any DeviceRepository
    let sender: PushSender
    let pauses: PauseWatcher?
    let logger: Logger

    public init(
        options: Options, redis: RedisClient, store: any DeviceRepository, sender: PushSender, pauses: PauseWatcher? = nil, logger: Logger
    ) {
        self.pauses = pauses
        self.options = options
        self.redis = redis
        self.store = store
        self.sender = sender
        self.logger = logger
    }

    var windowMilliseconds: Int { Int(options.window.components.seconds * 1000 + options.window.components.attoseconds / 1_000_000_000_000_000) }

    /// The one stream consumer (`StreamConsumer`) on the push stream; entries left pending (a pusher died, or the
    /// store could not be read) are taken over after 120 s.
    var consumer: StreamConsumer<RedisStreamDriver, PushHandler> {
        StreamConsumer(
            options: .init(name: "push", consumer: options.consumer, batchSize: 256, claimIdle: .seconds(120), reclaimEvery: .seconds(5)),
            driver: RoundupStream.push.driver(redis: redis, keys: options.keys, consumer: options.consumer, deadLetterMaxAge: .seconds(30 * 86_400)),
            handler: PushHandler(pusher: self), metrics: .init(gauges: [.length, .pending, .oldestPendingAge, .oldestWaitingAge, .lag]),
            logger: logger)
    }

    public func run() async throws {
        await withDiscardingTaskGroup { tasks in
            tasks.addTask { await self.deferredLoop() }
            await consumer.run(.push, pauses: pauses)
            tasks.cancelAll()
        }
        logger.notice("push consumer stopped", metadata: ["consumer": "\(options.consumer)"])
    }

    /// `roundup_push_deferred`: the deferred (coalesced) pushes waiting.
    func recordGauges() async {
        if let deferred = try? await redis.send(RedisCommand("ZCARD", [RedisArgument(options.keys.deferredPushes)])).int {
            Gauge(label: "roundup_push_deferred").record(deferred)
        }
    }

    /// Sends one push request to the account's devices; false when the devices could not be read (the entry stays
    /// pending).
    func handle(_ entry: Delivered<PushRequest>) async -> Bool {
        let request = entry.message
        // An operator paused the account: its pushes hold (pending) until it is resumed.
        if pauses?.isPaused(account: request.account) == true { return false }
        // Tracing on: a consumer span linked to the work that made the changes (a worker's batch), the APNs sends its
        // children.
        var attributes = SpanAttributes.processing("push", messageID: entry.id)
        attributes["roundup.push.kind"] = request.kind.rawValue
        attributes["roundup.push.reason"] = request.reason.rawValue
        return await RoundupTracing.withLinkedSpan("process push", ofKind: .consumer, links: request.trace.map { [$0] } ?? [], attributes: attributes)
        {
            await send(request, entryID: entry.id)
        }
    }

    private func send(_ request: PushRequest, entryID: String) async -> Bool {
        let account = request.account
        let devices: [DeviceRecord]
        do {
            devices = try await store.devices(accountID: account).filter { $0.deviceID != request.excludeDevice }
        } catch {
            logger.warning("devices not readable; the push entry stays pending", metadata: ["error": "\(error)"])
            return false
        }
        switch request.kind {
        case .alert:
            let payload = Self.alertPayload(reason: request.reason.rawValue, conflictIDs: request.conflictIDs.map { Int($0) })
            await withTaskGroup(of: Void.self) { group in
                for device in devices {
                    group.addTask {
                        await self.deliver(.alert, payload: payload, device: device, account: account, collapseID: nil, entryID: entryID)
                    }
                }
            }
        case .background:
            // A device that holds an open change stream has the changes already: a push would only wake it.
            let streaming = await streamingDevices(account: account)
            let sleeping = devices.filter { !streaming.contains($0.deviceID) }
            if sleeping.count < devices.count {
                Counter(label: "roundup_push_skipped_streaming_total").increment(by: devices.count - sleeping.count)
            }
            await withTaskGroup(of: Void.self) { group in
                for device in sleeping { group.addTask { await self.background(device: device, account: account, entryID: entryID) } }
            }
        }
        return true
    }

    /// The account's devices that hold an open change stream now (`RedisKeys.streamingDevices`, marked by the API
    /// processes); none when Redis cannot tell, so a push is sent rather than lost.
    func streamingDevices(account: String) async -> Set<String> {
        guard
            let reply = try? await redis.send(
                RedisCommand("HGETALL", [RedisArgument(options.keys.streamingDevices(account: account))]), timeout: .seconds(1))
        else { return [] }
        let now = Int(Date().timeIntervalSince1970 * 1000)
        return Set(reply.fieldMap.compactMap { device, until in (until.string.flatMap(Int.init) ?? 0) > now ? device : nil })
    }

    /// Sends now if the device had no background push in the window; otherwise defers one to the window's end.
    func background(device: DeviceRecord, account: String, entryID: String? = nil) async {
        let recent = options.keys.recentPush(account: account, device: device.deviceID)
        guard windowMilliseconds > 0 else {
            await deliver(
                .background, payload: Self.backgroundPayload, device: device, account: account, collapseID: "roundup-sync", entryID: entryID)
            return
        }
        do {
            let replies = try await redis.pipeline([
                RedisCommand("SET", [RedisArgument(recent), "1", "NX", "PX", RedisArgument(windowMilliseconds)]),
                RedisCommand("PTTL", [RedisArgument(recent)]),
            ])
            if case .status = replies[0] {
                // Sent now: a push deferred to the end of the last window is covered by this one.
                _ = try? await redis.send(
                    RedisCommand("ZREM", [RedisArgument(options.keys.deferredPushes), RedisArgument(account + "|" + device.deviceID)]))
                await deliver(
                    .background, payload: Self.backgroundPayload, device: device, account: account, collapseID: "roundup-sync", entryID: entryID)
            } else {
                let due = Int(Date().timeIntervalSince1970 * 1000) + max(0, replies[1].int ?? windowMilliseconds)
                _ = try await redis.send(
                    RedisCommand(
                        "ZADD",
                        [RedisArgument(options.keys.deferredPushes), "NX", RedisArgument(due), RedisArgument(account + "|" + device.deviceID)]))
                Counter(label: "roundup_push_coalesced_total").increment()
            }
        } catch {
            // Without Redis there is no window to respect; a background push is cheap to send once more.
            logger.warning("push window unavailable, sending", metadata: ["error": "\(error)"])
            await deliver(
                .background, payload: Self.backgroundPayload, device: device, account: account, collapseID: "roundup-sync", entryID: entryID)
        }
    }

    /// Sends the background pushes whose window ended; ZREM decides which pusher sends each.
    func deferredLoop() async {
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            try? await Task.sleep(for: .milliseconds(250))
            // Paused: the coalesced pushes wait too (they are sends like any other).
            if pauses?.isPaused(.push) == true { continue }
            let now = Int(Date().timeIntervalSince1970 * 1000)
            guard
                let due = try? await redis.send(
                    RedisCommand(
                        "ZRANGEBYSCORE",
                        [
                            RedisArgument(options.keys.deferredPushes), "-inf", RedisArgument(now), "LIMIT", "0", "256",
                        ])
                ).array
            else { continue }
            for member in due.compactMap(\.string) {
                let parts = member.split(separator: "|", maxSplits: 1).map(String.init)
                // An operator paused the account: its coalesced push waits too, a second later each round (behind the
                // others that are due), and goes once the account is resumed.
                if parts.count == 2, pauses?.isPaused(account: parts[0]) == true {
                    _ = try? await redis.send(
                        RedisCommand("ZADD", [RedisArgument(options.keys.deferredPushes), "XX", RedisArgument(now + 1000), RedisArgument(member)]))
                    continue
                }
                guard (try? await redis.send(RedisCommand("ZREM", [RedisArgument(options.keys.deferredPushes), RedisArgument(member)])).int) == 1
                else { continue }
                guard parts.count == 2 else { continue }
                let devices: [DeviceRecord]
                do {
                    devices = try await store.devices(accountID: parts[0])
                } catch {
                    // Put it back for a moment later rather than lose the window's last push.
                    _ = try? await redis.send(
                        RedisCommand("ZADD", [RedisArgument(options.keys.deferredPushes), "NX", RedisArgument(now + 1000), RedisArgument(member)]))
                    continue
                }
                guard let device = devices.first(where: { $0.deviceID == parts[1] }) else { continue }
                if await streamingDevices(account: parts[0]).contains(device.deviceID) {
                    Counter(label: "roundup_push_skipped_streaming_total").increment()
                    continue
                }
                _ = try? await redis.send(
                    RedisCommand(
                        "SET",
                        [RedisArgument(options.keys.recentPush(account: parts[0], device: parts[1])), "1", "PX", RedisArgument(windowMilliseconds)]))
                await deliver(.background, payload: Self.backgroundPayload, device: device, account: parts[0], collapseID: "roundup-sync")
            }
        }
    }

    /// Sends one push. `entryID`, the push request's entry, times `roundup_change_to_push_seconds`; pushes deferred to
    /// the end of a window have none (their wait is the window, by design).
    func deliver(
        _ type: APNsRequest.PushType, payload: ByteBuffer, device: DeviceRecord, account: String, collapseID: String?, entryID: String? = nil
    ) async {
        guard let app = sender.apps.app(for: device.bundleID) else {
            // Registered with an app this server has no credentials for: nothing can be signed for it. The device stays
            // (the credentials may come with the next restart).
            PushSender.count("dropped", "UnknownApp")
            logger.warning(
                "push not delivered: no APNs credentials for the device's app",
                metadata: ["account": "\(account)", "device": "\(device.deviceID)", "bundle_id": "\(device.bundleID?.rawValue ?? "")"])
            return
        }
        let expiration = Date().addingTimeInterval(type == .background ? 3600 : 86_400)
        let request = APNsRequest(
            deviceToken: device.apnsToken, topic: app.topic, pushType: type, payload: payload, expiration: expiration, collapseID: collapseID)
        // Within a trace: the send is a client span (never the device token).
        var attributes = SpanAttributes()
        attributes["http.request.method"] = "POST"
        attributes["url.template"] = "/3/device/{token}"
        attributes["roundup.push.type"] = type == .background ? "background" : "alert"
        let outcome = await RoundupTracing.withChildSpan("POST /3/device/{token}", ofKind: .client, attributes: attributes) {
            await sender.send(request, app: app, sandbox: device.environment == .sandbox)
        }
        switch outcome {
        case .sent:
            if let entryID { RoundupLatency.changeToPush.record(since: [entryID]) }
        case .deviceRemoved(let reason):
            // Only this registration: the app may have registered a new token for the device since.
            _ = try? await store.deleteDevice(accountID: account, deviceID: device.deviceID, apnsToken: device.apnsToken)
            Counter(label: "roundup_apns_devices_removed_total", dimensions: [("reason", reason)]).increment()
            logger.notice("device removed", metadata: ["account": "\(account)", "device": "\(device.deviceID)", "reason": "\(reason)"])
        case .dropped(let why), .failed(let why):
            logger.warning("push not delivered", metadata: ["account": "\(account)", "device": "\(device.deviceID)", "why": "\(why)"])
        }
    }

    /// Only `content-available` and our own small keys, as Apple asks of background pushes.
    static let backgroundPayload = ByteBuffer(string: #"{"aps":{"content-available":1},"roundup":{"sync":1}}"#)

    static func alertPayload(reason: String, conflictIDs: [Int]) -> ByteBuffer {
        let ids = conflictIDs.prefix(50).map(String.init).joined(separator: ",")
        return ByteBuffer(
            string:
                #"{"aps":{"alert":{"title":"Sync conflict","body":"A reminder was changed in Trello and on this device. Choose which to keep."},"category":"ROUNDUP_CONFLICT","sound":"default"},"roundup":{"reason":"\#(reason)","conflict_ids":[\#(ids)]}}"#
        )
    }
}

/// A batch of push requests, each handled at once beside the others. An entry that is no push request is
/// dead-lettered by the consumer (`RedisKeys.pushDeadLetters`).
struct PushHandler: StreamHandler {
    typealias Message = PushRequest
    let pusher: PushConsumer

    func handle(_ batch: [Delivered<PushRequest>]) async -> StreamBatchResult<UnclassifiedFailure> {
        await withTaskGroup(of: (String, Bool).self) { group in
            for entry in batch { group.addTask { (entry.id, await pusher.handle(entry)) } }
            var result = StreamBatchResult<UnclassifiedFailure>()
            for await (id, finished) in group {
                if finished { result.done.append(id) } else { result.retry.append((id, nil)) }
            }
            return result
        }
    }

    func recordGauges(inFlight: Int) async { await pusher.recordGauges() }
}

import Logging
import NIOConcurrencyHelpers
import NIOCore

/// A request in flight: the commands (pipelined, one flush) and the promise for their replies.
struct RedisRequest {
    var commands: [RedisCommand]
    var promise: EventLoopPromise<[RedisValue]>
    var timeout: TimeAmount
}

/// Encodes commands as RESP, decodes replies with hiredis's reader, and answers requests in order.
/// Any failure of the connection fails every request in flight and closes the channel: after a timeout
/// the reply order can no longer be trusted.
final class RedisChannelHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = RedisRequest
    typealias OutboundOut = ByteBuffer

    private struct Pending {
        var remaining: Int
        var replies: [RedisValue]
        var promise: EventLoopPromise<[RedisValue]>
        /// When the request fails with a timeout (nil: never), and what it says then.
        var deadline: NIODeadline?
        var name: String
        var timeout: TimeAmount
    }

    private let reader = RESPReader()
    /// Flushes are coalesced to one per event-loop tick: commands from many requests served in the same tick
    /// leave in one write (pipelining across callers), instead of one syscall each.
    private var flushScheduled = false
    private var pending = CircularBuffer<Pending>(initialCapacity: 16)
    private var failed: RedisClientError?
    private let endpoint: String
    /// Shared with the `RedisConnection`, so the client stops handing the connection out as soon as it fails.
    private let connectionFailed: NIOLockedValueBox<Bool>
    /// One timer for the whole connection, at the earliest deadline it knows of, instead of one per request: a request
    /// answered in time leaves it alone, and when it fires it checks every request still waiting and sets itself again.
    private var timer: Scheduled<Void>?
    private var timerDeadline: NIODeadline?

    init(endpoint: String, failed: NIOLockedValueBox<Bool>) {
        self.endpoint = endpoint
        self.connectionFailed = failed
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let request = unwrapOutboundIn(data)
        if let failed {
            request.promise.fail(failed)
            promise?.fail(failed)
            return
        }
        var bound = 0
        for command in request.commands { bound += command.encodedBound }
        var buffer = context.channel.allocator.buffer(capacity: bound)
        for command in request.commands { command.encode(into: &buffer) }
        var deadline: NIODeadline?
        if request.timeout > .zero {
            let at = NIODeadline.now() + request.timeout
            deadline = at
            if timerDeadline.map({ at < $0 }) ?? true { armTimer(at: at, context: context) }
        }
        pending.append(
            Pending(
                remaining: request.commands.count, replies: [], promise: request.promise, deadline: deadline,
                name: request.commands.first?.name ?? "?", timeout: request.timeout))
        context.write(wrapOutboundOut(buffer), promise: promise)
    }

    func flush(context: ChannelHandlerContext) {
        guard !flushScheduled else { return }
        flushScheduled = true
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        context.eventLoop.execute {
            let (handler, context) = loopBound.value
            handler.flushScheduled = false
            context.flush()
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        do {
            try reader.feed(buffer)
            while let reply = try reader.next() {
                guard !pending.isEmpty else {
                    throw RedisClientError(.protocolError, "reply from \(endpoint) with no command waiting")
                }
                pending[pending.startIndex].replies.append(reply)
                pending[pending.startIndex].remaining -= 1
                if pending[pending.startIndex].remaining == 0 {
                    let done = pending.removeFirst()
                    done.promise.succeed(done.replies)
                }
            }
        } catch let error as RedisClientError {
            failAll(error, context: context)
        } catch {
            failAll(RedisClientError(.protocolError, "\(error)"), context: context)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        failAll(RedisClientError(.connectionClosed, "connection to \(endpoint) closed"), context: context)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        failAll(RedisClientError(.connectionClosed, "connection to \(endpoint) failed: \(error)"), context: context)
    }

    private func armTimer(at deadline: NIODeadline, context: ChannelHandlerContext) {
        timer?.cancel()
        timerDeadline = deadline
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(deadline: deadline) {
            let (handler, context) = loopBound.value
            handler.timer = nil
            handler.timerDeadline = nil
            handler.checkDeadlines(context: context)
        }
    }

    /// Fails everything when a request has waited past its deadline (the replies' order can no longer be trusted),
    /// else sets the timer at the earliest deadline still waiting.
    private func checkDeadlines(context: ChannelHandlerContext) {
        let now = NIODeadline.now()
        var earliest: NIODeadline?
        for item in pending {
            guard let deadline = item.deadline else { continue }
            if deadline <= now {
                failAll(
                    RedisClientError(
                        .timeout, "\(item.name) to \(endpoint) got no reply within \(item.timeout.nanoseconds / 1_000_000) ms"),
                    context: context)
                return
            }
            if earliest.map({ deadline < $0 }) ?? true { earliest = deadline }
        }
        if let earliest { armTimer(at: earliest, context: context) }
    }

    private func failAll(_ error: RedisClientError, context: ChannelHandlerContext) {
        if failed == nil { failed = error }
        connectionFailed.withLockedValue { $0 = true }
        timer?.cancel()
        timer = nil
        timerDeadline = nil
        while let item = pending.popFirst() { item.promise.fail(error) }
        context.close(promise: nil)
    }
}

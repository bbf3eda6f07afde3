import Logging
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
        var deadline: Scheduled<Void>?
    }

    private let reader = RESPReader()
    /// Flushes are coalesced to one per event-loop tick: commands from many requests served in the same tick
    /// leave in one write (pipelining across callers), instead of one syscall each.
    private var flushScheduled = false
    private var pending = CircularBuffer<Pending>(initialCapacity: 16)
    private var failed: RedisClientError?
    private let endpoint: String

    init(endpoint: String) { self.endpoint = endpoint }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let request = unwrapOutboundIn(data)
        if let failed {
            request.promise.fail(failed)
            promise?.fail(failed)
            return
        }
        var buffer = context.channel.allocator.buffer(capacity: 64 * request.commands.count)
        for command in request.commands { command.encode(into: &buffer) }
        let deadline: Scheduled<Void>?
        if request.timeout > .zero {
            let name = request.commands.first?.name ?? "?"
            let endpoint = self.endpoint
            let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            deadline = context.eventLoop.scheduleTask(in: request.timeout) {
                let (handler, context) = loopBound.value
                handler.failAll(
                    RedisClientError(.timeout, "\(name) to \(endpoint) got no reply within \(request.timeout.nanoseconds / 1_000_000) ms"),
                    context: context)
            }
        } else {
            deadline = nil
        }
        pending.append(Pending(remaining: request.commands.count, replies: [], promise: request.promise, deadline: deadline))
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
                    done.deadline?.cancel()
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

    private func failAll(_ error: RedisClientError, context: ChannelHandlerContext) {
        if failed == nil { failed = error }
        while let item = pending.popFirst() {
            item.deadline?.cancel()
            item.promise.fail(error)
        }
        context.close(promise: nil)
    }
}

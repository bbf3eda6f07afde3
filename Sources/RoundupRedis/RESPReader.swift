import CHiredis
import NIOCore

/// hiredis's RESP reader (`redisReader`): fed with bytes as they arrive, it yields complete replies.
/// It does no I/O, so it is safe to drive from a NIO event loop. One per connection, not thread-safe.
final class RESPReader {
    private let reader: UnsafeMutablePointer<redisReader>

    init() {
        guard let reader = redisReaderCreate() else { fatalError("redisReaderCreate: out of memory") }
        self.reader = reader
    }

    deinit { redisReaderFree(reader) }

    func feed(_ buffer: ByteBuffer) throws {
        let status = buffer.withUnsafeReadableBytes { raw -> Int32 in
            guard let base = raw.baseAddress, raw.count > 0 else { return REDIS_OK }
            return redisReaderFeed(reader, base.assumingMemoryBound(to: CChar.self), raw.count)
        }
        if status != REDIS_OK { throw protocolError() }
    }

    /// The next complete reply, or nil when more bytes are needed.
    func next() throws -> RedisValue? {
        var raw: UnsafeMutableRawPointer?
        if redisReaderGetReply(reader, &raw) != REDIS_OK { throw protocolError() }
        guard let raw else { return nil }
        let reply = raw.assumingMemoryBound(to: redisReply.self)
        defer { freeReplyObject(raw) }
        return Self.convert(reply)
    }

    private func protocolError() -> RedisClientError {
        let message = withUnsafeBytes(of: reader.pointee.errstr) { raw in
            String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
        }
        return RedisClientError(.protocolError, "invalid RESP from server: \(message)")
    }

    private static func convert(_ reply: UnsafeMutablePointer<redisReply>) -> RedisValue {
        let r = reply.pointee
        switch r.type {
        case REDIS_REPLY_STRING:
            return .bulk(bytes(r.str, r.len))
        case REDIS_REPLY_STATUS:
            return .status(String(decoding: bytes(r.str, r.len), as: UTF8.self))
        case REDIS_REPLY_ERROR:
            return .error(String(decoding: bytes(r.str, r.len), as: UTF8.self))
        case REDIS_REPLY_INTEGER:
            return .integer(Int(r.integer))
        case REDIS_REPLY_NIL:
            return .null
        case REDIS_REPLY_ARRAY:
            var values: [RedisValue] = []
            values.reserveCapacity(r.elements)
            for i in 0..<r.elements {
                if let element = r.element[i] { values.append(convert(element)) } else { values.append(.null) }
            }
            return .array(values)
        default:
            return .null
        }
    }

    private static func bytes(_ pointer: UnsafeMutablePointer<CChar>?, _ count: Int) -> [UInt8] {
        guard let pointer, count > 0 else { return [] }
        return [UInt8](UnsafeRawBufferPointer(start: pointer, count: count))
    }
}

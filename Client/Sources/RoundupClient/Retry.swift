import Foundation
import HTTPTypes
import OpenAPIRuntime

/// How transient failures are retried: exponential backoff with full jitter (a random wait between zero and the
/// doubling ceiling), and the server's `Retry-After` when it gives one.
public struct RetryPolicy: Sendable {
    /// Attempts in all, the first included (1: never retry).
    public var attempts: Int
    public var base: Duration
    public var ceiling: Duration

    public init(attempts: Int = 5, base: Duration = .milliseconds(250), ceiling: Duration = .seconds(30)) {
        self.attempts = max(1, attempts)
        self.base = base
        self.ceiling = ceiling
    }

    public static let standard = RetryPolicy()
    public static let never = RetryPolicy(attempts: 1)

    /// The wait before retry number `retry` (1 for the first retry): the server's `Retry-After` when it said one
    /// (never beyond the ceiling), else a random duration up to base × 2^(retry−1).
    public func delay(retry: Int, retryAfter: Duration? = nil) -> Duration {
        if let retryAfter { return min(retryAfter, ceiling) }
        let exponent = min(retry - 1, 30)
        let top = min(Double(base.components.seconds) + Double(base.components.attoseconds) / 1e18, 1e6) * pow(2, Double(exponent))
        let capped = min(top, Double(ceiling.components.seconds))
        return .milliseconds(Int64(Double.random(in: 0...capped) * 1000))
    }
}

/// Retries what is safe to retry: a 429 or 503 answer (the server did not act on the request) for any request, and
/// a failure to get any answer (the network, a timeout) or a 502/504 from a proxy for requests that are safe to send
/// twice (GET, HEAD, PUT, DELETE, and POSTs that carry an `Idempotency-Key`). The change stream is not retried here:
/// `liveChanges` reconnects by itself.
struct RetryMiddleware: ClientMiddleware {
    let policy: RetryPolicy

    func intercept(
        _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
        next: @Sendable (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        guard operationID != "streamChanges", policy.attempts > 1 else { return try await next(request, body, baseURL) }
        let idempotent =
            [.get, .head, .put, .delete].contains(request.method) || request.headerFields[HTTPField.Name("Idempotency-Key")!] != nil
        var retry = 0
        while true {
            do {
                return try await next(request, body, baseURL)
            } catch {
                retry += 1
                let failure = RoundupError.unwrap(error)
                let wait: Duration?
                if let failure = failure as? RoundupError {
                    switch failure.status {
                    case 429, 503: wait = policy.delay(retry: retry, retryAfter: failure.retryAfter)
                    case 502,
                        504 where idempotent && failure.code.known == nil:
                        wait = policy.delay(retry: retry)
                    default: wait = nil
                    }
                } else if failure is CancellationError {
                    wait = nil
                } else {
                    wait = idempotent ? policy.delay(retry: retry) : nil
                }
                guard let wait, retry < policy.attempts else { throw error }
                try await Task.sleep(for: wait)
            }
        }
    }
}

public import Foundation
public import RoundupCore

/// A real headless Chromium, driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: JSON messages
/// ended by a NUL byte, written to its descriptor 3 and read from its descriptor 4), so tests open pages, read what
/// they show, press their buttons and take screenshots, as an operator's browser would.
public final class HeadlessBrowser: @unchecked Sendable {
    // @unchecked: used by one test task at a time; `buffer`, `events` and `nextID` are only touched from its calls.
    public struct BrowserError: Error, CustomStringConvertible {
        public var description: String
    }

    let process: ManagedProcess
    let toBrowser: Int32
    let fromBrowser: Int32
    let profile: URL
    var buffer: [UInt8] = []
    var events: [JSONValue] = []
    var nextID = 0
    var session = ""

    /// The Chromium of Debian's `chromium` package, or nil when it is not installed.
    public static var executable: URL? {
        ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"].map(URL.init(fileURLWithPath:)).first {
            FileManager.default.isExecutableFile(atPath: $0.path)
        }
    }

    /// Starts Chromium with a fresh profile in `directory` and opens one tab of `width`×`height`.
    public init(directory: URL, width: Int = 1280, height: Int = 900) async throws {
        guard let executable = Self.executable else {
            throw BrowserError(description: "chromium is not installed (Debian: apt-get install chromium)")
        }
        var input: [Int32] = [0, 0]
        var output: [Int32] = [0, 0]
        guard pipe(&input) == 0, pipe(&output) == 0 else { throw BrowserError(description: "pipe: \(String(cString: strerror(errno)))") }
        profile = directory.appendingPathComponent("chromium-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: profile, withIntermediateDirectories: true)
        process = try ManagedProcess(
            name: "chromium", executable: executable,
            arguments: [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--disable-background-networking", "--remote-debugging-pipe", "--user-data-dir=\(profile.path)",
                "--window-size=\(width),\(height)", "about:blank",
            ], logDirectory: directory, descriptors: [(input[0], 3), (output[1], 4)])
        Foundation.close(input[0])
        Foundation.close(output[1])
        toBrowser = input[1]
        fromBrowser = output[0]
        let target = try await send("Target.createTarget", ["url": "about:blank"], inSession: false)
        guard let targetID = target["targetId"]?.stringValue else { throw BrowserError(description: "no target: \(target)") }
        let attached = try await send("Target.attachToTarget", ["targetId": .string(targetID), "flatten": true], inSession: false)
        guard let session = attached["sessionId"]?.stringValue else { throw BrowserError(description: "not attached: \(attached)") }
        self.session = session
        _ = try await send("Page.enable")
        _ = try await send(
            "Emulation.setDeviceMetricsOverride",
            ["width": .number(Double(width)), "height": .number(Double(height)), "deviceScaleFactor": .number(1), "mobile": false])
    }

    /// Opens `url` and waits for its load event.
    public func open(_ url: String) async throws {
        let mark = events.count
        let answer = try await send("Page.navigate", ["url": .string(url)])
        if let error = answer["errorText"]?.stringValue { throw BrowserError(description: "navigating to \(url): \(error)") }
        try await waitForLoad(after: mark)
    }

    /// Headers sent with every later request of the page (an `Authorization` for HTTP Basic, as a person who signed in).
    public func setExtraHeaders(_ headers: [String: String]) async throws {
        _ = try await send("Network.enable")
        _ = try await send("Network.setExtraHTTPHeaders", ["headers": .object(headers.mapValues { .string($0) })])
    }

    /// The value of a JavaScript expression in the page (JSON-able values only).
    public func evaluate(_ expression: String) async throws -> JSONValue {
        let answer = try await send("Runtime.evaluate", ["expression": .string(expression), "returnByValue": true])
        if let exception = answer["exceptionDetails"] { throw BrowserError(description: "\(expression): \(exception)") }
        return answer["result"]?["value"] ?? .null
    }

    /// Clicks the element `selector` finds, as a person would, and waits for the page it leads to.
    public func clickAndWait(_ selector: String) async throws {
        let mark = events.count
        let found = try await evaluate(
            "(() => { const e = document.querySelector(\(JSONValue.string(selector).canonicalJSON)); if (!e) return false; e.click(); return true })()"
        )
        guard found == .bool(true) else { throw BrowserError(description: "nothing on the page matches \(selector)") }
        try await waitForLoad(after: mark)
    }

    /// A PNG of the whole page.
    public func screenshot() async throws -> Data {
        let answer = try await send("Page.captureScreenshot", ["format": "png", "captureBeyondViewport": true])
        guard let data = answer["data"]?.stringValue.flatMap({ Data(base64Encoded: $0) }) else { throw BrowserError(description: "no screenshot") }
        return data
    }

    public func close() async {
        _ = try? await send("Browser.close", [:], inSession: false, timeout: .seconds(3))
        Foundation.close(toBrowser)
        Foundation.close(fromBrowser)
        await process.stop()
        try? FileManager.default.removeItem(at: profile)
    }

    // MARK: The protocol

    func waitForLoad(after mark: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            if events[mark...].contains(where: { $0["method"] == "Page.loadEventFired" && $0["sessionId"]?.stringValue == session }) { return }
            try await receive(until: deadline)
        }
        throw BrowserError(description: "the page did not load within 20 s")
    }

    @discardableResult
    func send(
        _ method: String, _ parameters: [String: JSONValue] = [:], inSession: Bool = true, timeout: Duration = .seconds(20)
    ) async throws
        -> JSONValue
    {
        nextID += 1
        let id = nextID
        var message: [String: JSONValue] = ["id": .number(Double(id)), "method": .string(method), "params": .object(parameters)]
        if inSession { message["sessionId"] = .string(session) }
        let bytes = Array(JSONValue.object(message).canonicalJSON.utf8) + [0]
        let written = bytes.withUnsafeBytes { write(toBrowser, $0.baseAddress, $0.count) }
        guard written == bytes.count else { throw BrowserError(description: "chromium is not reading (\(method)): \(process.output.suffix(2000))") }
        let deadline = ContinuousClock.now + timeout
        while true {
            if let index = events.firstIndex(where: { $0["id"] == .number(Double(id)) }) {
                let answer = events.remove(at: index)
                if let error = answer["error"] { throw BrowserError(description: "\(method): \(error)") }
                return answer["result"] ?? .null
            }
            try await receive(until: deadline)
        }
    }

    /// Reads what Chromium has sent (waiting up to `deadline` for something) into `events`.
    func receive(until deadline: ContinuousClock.Instant) async throws {
        let left = deadline - ContinuousClock.now
        guard left > .zero else { throw BrowserError(description: "chromium did not answer in time: \(process.output.suffix(2000))") }
        let milliseconds = Int32(min(1000, max(1, left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000)))
        let descriptor = fromBrowser
        // The blocking poll and read run on a thread of their own, not on the cooperative pool.
        let chunk: [UInt8]? = await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
                guard poll(&poller, 1, milliseconds) > 0 else { return continuation.resume(returning: []) }
                var bytes = [UInt8](repeating: 0, count: 1 << 20)
                let count = read(descriptor, &bytes, bytes.count)
                continuation.resume(returning: count > 0 ? Array(bytes[..<count]) : nil)
            }
        }
        guard let chunk else { throw BrowserError(description: "chromium closed its pipe: \(process.output.suffix(2000))") }
        buffer += chunk
        while let end = buffer.firstIndex(of: 0) {
            let message = Array(buffer[..<end])
            buffer.removeFirst(end + 1)
            if let value = try? JSONParser.parse(message) { events.append(value) }
        }
    }
}

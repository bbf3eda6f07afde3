import CoreMetrics
public import Foundation
public import RoundupRuntime

extension RoundupLatency {
    /// Records, for each of `entryIDs`, the time from when it was added to its stream until `now` (one timer for all).
    public func record(since entryIDs: some Collection<String>, now: Date = Date()) {
        guard !entryIDs.isEmpty else { return }
        let timer = CoreMetrics.Timer(label: rawValue)
        for id in entryIDs {
            guard let added = StreamStats.milliseconds(ofID: id) else { continue }
            timer.recordNanoseconds(Int64(max(0, now.timeIntervalSince1970 * 1000 - added) * 1_000_000))
        }
    }
}

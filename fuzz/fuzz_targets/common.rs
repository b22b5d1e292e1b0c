//! What the three targets share besides the walk (`packfs_testkit`).

/// libfuzzer-sys aborts on every panic, from its panic hook, even one that
/// the code under test catches. packfs catches exactly one kind on purpose:
/// lzokay-native panics (arithmetic overflow) on some corrupt LZO streams,
/// and `packfs_format::codec::decompress` turns that into a corrupt-block
/// error with `catch_unwind`, which is what the stable tests see. Panics
/// raised inside lzokay-native are let through to that `catch_unwind`;
/// every other panic still aborts, with libfuzzer-sys's hook.
pub fn tolerate_caught_codec_panics() {
    let abort = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let in_lzo = info
            .location()
            .is_some_and(|l| l.file().contains("lzokay-native-"));
        if !in_lzo {
            abort(info);
        }
    }));
}

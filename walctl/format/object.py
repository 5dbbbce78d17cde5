"""Objects (Stream Set Object or Stream Object): data blocks, index, footer (docs/FORMATS.md 3).

    0                                              indexStartPosition            object_size
    | DataBlock | DataBlock | ... | DataBlock       | IndexBlock: N x 36 | Footer: 48 |

DataBlock, 10-byte header then the block's StreamRecordBatches back to back, all of one stream:

    0      1      2             6            10
    +------+------+-------------+------------+---------------------------------
    | 0x5A | 0x02 | recordCount | dataLength | StreamRecordBatch ... (dataLength bytes)
    +------+------+-------------+------------+---------------------------------

Index entry, 36 bytes, entries sorted by (streamId, startOffset):

    0          8             16               20            24              32          36
    +----------+-------------+----------------+-------------+---------------+-----------+
    | streamId | startOffset | endOffsetDelta | recordCount | blockPosition | blockSize |
    +----------+-------------+----------------+-------------+---------------+-----------+

Footer, 48 bytes, the last bytes of the object:

    0                    8                  12        16         20        24           40      48
    +--------------------+------------------+---------+----------+---------+------------+-------+
    | indexStartPosition | indexBlockLength | version | indexCrc | dataCrc | 16 x zero  | magic |
    +--------------------+------------------+---------+----------+---------+------------+-------+
    version 1 (walctl): indexCrc = crc32c(IndexBlock), dataCrc = crc32c([0, indexStartPosition)).
    version 0 (AutoMQ): zeros in [12, 40), which AutoMQ ignores; nothing to check.

recordCount (in a block header and in an index entry) counts StreamRecordBatches, as
AutoMQ does (its "records"), not the stream offsets they cover. An index entry's
range may cover several consecutive DataBlocks of its stream (as after compaction).
Integers are signed where AutoMQ writes a Java long or int, so a value with the sign
bit set is refused as out of bounds instead of read as a huge size.
Errors carry ``offset`` = the byte position in the object.

One module per structure; this module re-exports their names so that
``from walctl.format.object import X`` and ``walctl.format.object.X`` keep working:

    walctl.format.datablock       DataBlockHeader
    walctl.format.index_entry     IndexEntry
    walctl.format.footer          Footer, the versions
    walctl.format.object_reader   parse_tail, decode_index, find_entries, iter_blocks, verify_object
    walctl.format.object_builder  build_object, assemble_object, BuiltObject
"""

from walctl.format.datablock import (  # noqa: F401
    DATA_BLOCK_FLAGS,
    DATA_BLOCK_HEADER_SIZE,
    DATA_BLOCK_HEADER_STRUCT,
    DATA_BLOCK_MAGIC,
    INT32_MAX,
    DataBlockHeader,
)
from walctl.format.footer import (  # noqa: F401
    _FOOTER_RESERVED,
    FOOTER_MAGIC,
    FOOTER_SIZE,
    FOOTER_STRUCT,
    VERSION_AUTOMQ,
    VERSION_WALCTL,
    VERSIONS,
    Footer,
)
from walctl.format.index_entry import INDEX_ENTRY_SIZE, INDEX_ENTRY_STRUCT, INT64_LIMIT, IndexEntry  # noqa: F401
from walctl.format.object_builder import (  # noqa: F401
    DEFAULT_BLOCK_SIZE,
    BuiltObject,
    StreamRange,
    _check_stream,
    _finish,
    _group_blocks,
    assemble_object,
    build_object,
)
from walctl.format.object_reader import (  # noqa: F401
    DEFAULT_ENTRIES_GUESS,
    Problem,
    _decode_entry_blocks,
    _relocated,
    _scan_index,
    check_data_crc,
    decode_index,
    find_entries,
    iter_blocks,
    parse_tail,
    tail_length_hint,
    verify_object,
)

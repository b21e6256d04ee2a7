// Pickle opcodes (CPython Lib/pickle.py), shared by the unpickler and the pickler.
#pragma once

#include <cstdint>
#include <string_view>

namespace ckpt::pickle::op {

enum : std::uint8_t {
    MARK = '(',
    STOP = '.',
    POP = '0',
    POP_MARK = '1',
    DUP = '2',
    FLOAT = 'F',
    INT = 'I',
    BININT = 'J',
    BININT1 = 'K',
    LONG = 'L',
    BININT2 = 'M',
    NONE = 'N',
    PERSID = 'P',
    BINPERSID = 'Q',
    REDUCE = 'R',
    STRING = 'S',
    BINSTRING = 'T',
    SHORT_BINSTRING = 'U',
    UNICODE = 'V',
    BINUNICODE = 'X',
    APPEND = 'a',
    BUILD = 'b',
    GLOBAL = 'c',
    DICT = 'd',
    EMPTY_DICT = '}',
    APPENDS = 'e',
    GET = 'g',
    BINGET = 'h',
    INST = 'i',
    LONG_BINGET = 'j',
    LIST = 'l',
    EMPTY_LIST = ']',
    OBJ = 'o',
    PUT = 'p',
    BINPUT = 'q',
    LONG_BINPUT = 'r',
    SETITEM = 's',
    TUPLE = 't',
    EMPTY_TUPLE = ')',
    SETITEMS = 'u',
    BINFLOAT = 'G',
    // protocol 2
    PROTO = 0x80,
    NEWOBJ = 0x81,
    EXT1 = 0x82,
    EXT2 = 0x83,
    EXT4 = 0x84,
    TUPLE1 = 0x85,
    TUPLE2 = 0x86,
    TUPLE3 = 0x87,
    NEWTRUE = 0x88,
    NEWFALSE = 0x89,
    LONG1 = 0x8a,
    LONG4 = 0x8b,
    // protocol 3
    BINBYTES = 'B',
    SHORT_BINBYTES = 'C',
    // protocol 4
    SHORT_BINUNICODE = 0x8c,
    BINUNICODE8 = 0x8d,
    BINBYTES8 = 0x8e,
    EMPTY_SET = 0x8f,
    ADDITEMS = 0x90,
    FROZENSET = 0x91,
    NEWOBJ_EX = 0x92,
    STACK_GLOBAL = 0x93,
    MEMOIZE = 0x94,
    FRAME = 0x95,
    // protocol 5
    BYTEARRAY8 = 0x96,
    NEXT_BUFFER = 0x97,
    READONLY_BUFFER = 0x98,
};

// The name pickletools uses, or "" for a byte that is no opcode.
constexpr std::string_view name(std::uint8_t code)
{
    switch (code) {
    case MARK:
        return "MARK";
    case STOP:
        return "STOP";
    case POP:
        return "POP";
    case POP_MARK:
        return "POP_MARK";
    case DUP:
        return "DUP";
    case FLOAT:
        return "FLOAT";
    case INT:
        return "INT";
    case BININT:
        return "BININT";
    case BININT1:
        return "BININT1";
    case LONG:
        return "LONG";
    case BININT2:
        return "BININT2";
    case NONE:
        return "NONE";
    case PERSID:
        return "PERSID";
    case BINPERSID:
        return "BINPERSID";
    case REDUCE:
        return "REDUCE";
    case STRING:
        return "STRING";
    case BINSTRING:
        return "BINSTRING";
    case SHORT_BINSTRING:
        return "SHORT_BINSTRING";
    case UNICODE:
        return "UNICODE";
    case BINUNICODE:
        return "BINUNICODE";
    case APPEND:
        return "APPEND";
    case BUILD:
        return "BUILD";
    case GLOBAL:
        return "GLOBAL";
    case DICT:
        return "DICT";
    case EMPTY_DICT:
        return "EMPTY_DICT";
    case APPENDS:
        return "APPENDS";
    case GET:
        return "GET";
    case BINGET:
        return "BINGET";
    case INST:
        return "INST";
    case LONG_BINGET:
        return "LONG_BINGET";
    case LIST:
        return "LIST";
    case EMPTY_LIST:
        return "EMPTY_LIST";
    case OBJ:
        return "OBJ";
    case PUT:
        return "PUT";
    case BINPUT:
        return "BINPUT";
    case LONG_BINPUT:
        return "LONG_BINPUT";
    case SETITEM:
        return "SETITEM";
    case TUPLE:
        return "TUPLE";
    case EMPTY_TUPLE:
        return "EMPTY_TUPLE";
    case SETITEMS:
        return "SETITEMS";
    case BINFLOAT:
        return "BINFLOAT";
    case PROTO:
        return "PROTO";
    case NEWOBJ:
        return "NEWOBJ";
    case EXT1:
        return "EXT1";
    case EXT2:
        return "EXT2";
    case EXT4:
        return "EXT4";
    case TUPLE1:
        return "TUPLE1";
    case TUPLE2:
        return "TUPLE2";
    case TUPLE3:
        return "TUPLE3";
    case NEWTRUE:
        return "NEWTRUE";
    case NEWFALSE:
        return "NEWFALSE";
    case LONG1:
        return "LONG1";
    case LONG4:
        return "LONG4";
    case BINBYTES:
        return "BINBYTES";
    case SHORT_BINBYTES:
        return "SHORT_BINBYTES";
    case SHORT_BINUNICODE:
        return "SHORT_BINUNICODE";
    case BINUNICODE8:
        return "BINUNICODE8";
    case BINBYTES8:
        return "BINBYTES8";
    case EMPTY_SET:
        return "EMPTY_SET";
    case ADDITEMS:
        return "ADDITEMS";
    case FROZENSET:
        return "FROZENSET";
    case NEWOBJ_EX:
        return "NEWOBJ_EX";
    case STACK_GLOBAL:
        return "STACK_GLOBAL";
    case MEMOIZE:
        return "MEMOIZE";
    case FRAME:
        return "FRAME";
    case BYTEARRAY8:
        return "BYTEARRAY8";
    case NEXT_BUFFER:
        return "NEXT_BUFFER";
    case READONLY_BUFFER:
        return "READONLY_BUFFER";
    default:
        return "";
    }
}

}  // namespace ckpt::pickle::op

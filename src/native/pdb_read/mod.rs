//! Reading a PDB's debug information through the file's mapping, as symbolic 13.9's
//! PDB object and debug session read it: the pdb crate's source over the mapping
//! (`source`), the streams every read needs (`Streams`), the functions of one module
//! (`walk`), the public symbols, and the SRCSRV stream's file mappings (`srcsrv`).
//! Shared by the SymCache writer, which reads every module in turn and drops each, and
//! the cold reader, which parses the module that holds an address. symbolic's session
//! reads its streams through a copying source and keeps every module it has read: most
//! of the file, on the heap, until the conversion ends.

mod source;
mod srcsrv;
mod walk;

pub use source::MappedSource;
pub use srcsrv::SourceServer;
pub use walk::{Broken, module_functions};

use std::borrow::Cow;
use std::cell::{OnceCell, RefCell};
use std::ops::Deref;

use ::pdb::{
    AddressMap, DebugInformation, FallibleIterator, IdInformation, ImageSectionHeader, Module,
    ModuleInfo, PDB, PdbInternalSectionOffset, RawString, StringTable, SymbolData, SymbolIndex,
    SymbolIter, SymbolTable, TypeInformation,
};
use pdb_addr2line::{ModuleProvider, TypeFormatter};
use symbolic::debuginfo::Symbol;

/// The type formatter symbolic names functions with, over `Streams`.
pub type Formatter<'a> = TypeFormatter<'a, 'static>;

/// The streams are views of the mapped file (or spill files) that hold the handle, so
/// the pdb crate's `'s` can be `'static`.
type Pdb = PDB<'static, MappedSource>;

/// The streams of a PDB that every read needs, owned.
pub struct Streams {
    pdb: RefCell<Pdb>,
    pub debug_info: DebugInformation<'static>,
    type_info: TypeInformation<'static>,
    id_info: IdInformation<'static>,
    string_table: Option<StringTable<'static>>,
    pub address_map: AddressMap<'static>,
    sections: Option<Vec<ImageSectionHeader>>,
    pub global_symbols: SymbolTable<'static>,
    /// The SRCSRV stream, if the PDB has one (read by `SourceServer`).
    srcsrv: Option<Box<dyn Deref<Target = [u8]>>>,
    /// Module streams the type formatter asked for, to resolve cross-module type and id
    /// references; kept for as long as the formatter, which holds on to parts of them.
    formatter_modules: Vec<OnceCell<Option<ModuleInfo<'static>>>>,
}

impl Streams {
    /// Reads what `PdbObject::parse` and `PdbDebugSession::build` read, failing where they
    /// fail.
    pub fn open(source: MappedSource) -> Result<Self, ::pdb::Error> {
        let mut pdb = PDB::open(source)?;
        let debug_info = pdb.debug_information()?;
        let global_symbols = pdb.global_symbols()?;
        let sections = pdb.sections()?;
        // `PdbStreams::from_pdb`: a PDB without a string table is fine, but one that has
        // a broken one (or a broken SRCSRV stream) fails the conversion.
        let string_table = match pdb.string_table() {
            Ok(string_table) => Some(string_table),
            Err(::pdb::Error::StreamNameNotFound) => None,
            Err(err) => return Err(err),
        };
        let srcsrv = match pdb.named_stream(b"srcsrv") {
            Ok(stream) => Some(Box::new(stream) as Box<dyn Deref<Target = [u8]>>),
            Err(::pdb::Error::StreamNameNotFound) => None,
            Err(err) => return Err(err),
        };
        let type_info = pdb.type_information()?;
        let id_info = pdb.id_information()?;
        let address_map = pdb.address_map()?;
        let module_count = debug_info.modules()?.count()?;
        Ok(Streams {
            pdb: RefCell::new(pdb),
            debug_info,
            type_info,
            id_info,
            string_table,
            address_map,
            sections,
            global_symbols,
            srcsrv,
            formatter_modules: (0..module_count).map(|_| OnceCell::new()).collect(),
        })
    }

    pub fn module_info(
        &self,
        module: &Module<'_>,
    ) -> Result<Option<ModuleInfo<'static>>, ::pdb::Error> {
        self.pdb.borrow_mut().module_info(module)
    }

    /// `ExecutableSections::contains` of symbolic's PDB reader.
    pub fn is_executable(&self, offset: PdbInternalSectionOffset) -> bool {
        let Some(sections) = &self.sections else {
            return false;
        };
        (offset.section as usize)
            .checked_sub(1)
            .and_then(|index| sections.get(index))
            .is_some_and(|section| {
                section.characteristics.executable() || section.characteristics.execute()
            })
    }

    /// The type formatter symbolic's session builds, with the module list it reads.
    pub fn formatter(&self) -> Result<Formatter<'_>, ::pdb::Error> {
        let modules: Vec<Module<'_>> = self.debug_info.modules()?.collect()?;
        TypeFormatter::new_from_parts(
            self,
            modules,
            &self.debug_info,
            &self.type_info,
            &self.id_info,
            self.string_table.as_ref(),
            Default::default(),
        )
    }

    /// The public symbols `PdbObject::symbols` yields, in stream order.
    pub fn public_symbols(&self) -> PublicSymbols<'_> {
        PublicSymbols {
            streams: self,
            symbols: self.global_symbols.iter(),
        }
    }
}

impl ModuleProvider<'static> for Streams {
    fn get_module_info(
        &self,
        module_index: usize,
        module: &Module,
    ) -> Result<Option<&ModuleInfo<'static>>, ::pdb::Error> {
        let Some(cell) = self.formatter_modules.get(module_index) else {
            return Ok(None);
        };
        if let Some(info) = cell.get() {
            return Ok(info.as_ref());
        }
        let info = self.module_info(module)?;
        Ok(cell.get_or_init(|| info).as_ref())
    }
}

/// A public symbol in an executable section.
pub struct PublicSymbol<'t> {
    pub index: SymbolIndex,
    pub rva: u32,
    pub name: RawString<'t>,
}

impl PublicSymbol<'_> {
    /// As symbolic's symbol iterator yields it.
    pub fn to_symbol(&self) -> Symbol<'static> {
        Symbol {
            name: Some(Cow::Owned(self.name.to_string().into_owned())),
            address: u64::from(self.rva),
            size: 0,
        }
    }
}

/// symbolic's `PdbSymbolIterator`: stops at the first record it cannot read, and skips
/// public symbols outside executable sections or without an address.
pub struct PublicSymbols<'t> {
    streams: &'t Streams,
    symbols: SymbolIter<'t>,
}

impl<'t> Iterator for PublicSymbols<'t> {
    type Item = PublicSymbol<'t>;

    fn next(&mut self) -> Option<PublicSymbol<'t>> {
        while let Ok(Some(symbol)) = self.symbols.next() {
            if let Ok(SymbolData::Public(public)) = symbol.parse() {
                if !self.streams.is_executable(public.offset) {
                    continue;
                }
                let Some(rva) = public.offset.to_rva(&self.streams.address_map) else {
                    continue;
                };
                return Some(PublicSymbol {
                    index: symbol.index(),
                    rva: rva.0,
                    name: public.name,
                });
            }
        }
        None
    }
}
